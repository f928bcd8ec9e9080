"""Generated programs and gradients kept on disk (``disk.py``), keyed by the structure of
the graphs they came from (``serialize.py``); the directory of every disk cache, and its
fallback when it cannot be written (``location.py``); what the caches hold, listed and
cleared by ``tegrad cache`` (``contents.py``)."""
