"""What the host targets share (the NumPy reference and the compiled cpu target): the
contraction engine (``products.py``, ``views.py``, ``workspace.py``) and the operations it
asks of its target (``ops.py``), scatters (``scatter.py``), NumPy evaluation of a compute
(``evaluate.py``), the scan executor (``scan_run.py``) and liveness (``liveness.py``)."""
