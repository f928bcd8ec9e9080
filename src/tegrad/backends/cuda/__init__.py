"""``target="cuda"``: the plan's kernels as Triton kernels on an NVIDIA GPU, or, with
``TRITON_INTERPRET=1``, in Triton's interpreter on CPU torch tensors (``target.py``)."""
