"""C-like renderers of the loop-nest tree (``lower/nest.py``): a dialect per target."""
