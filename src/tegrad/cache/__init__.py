"""Generated programs and gradients kept on disk (``disk.py``), keyed by the structure of
the graphs they came from (``serialize.py``)."""
