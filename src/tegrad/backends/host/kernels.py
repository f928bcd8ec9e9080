"""A non-scan kernel of a plan run on the host: a general kernel evaluated by NumPy, a
contraction by the host engine (``products.py``), a scatter by ``scatter.py``, a view
by ``view_kernel.py``."""

from __future__ import annotations

import numpy as np

from ...lower.kernels import Contraction, General, Scatter, View
from .evaluate import evaluate_compute
from .ops import HostOps
from .products import run_contraction
from .scatter import run_scatter
from .view_kernel import ViewOf


def run_kernel(kernel, arrays: dict, host: HostOps) -> np.ndarray:
    """The array ``kernel`` makes from ``arrays``."""
    if isinstance(kernel, General):
        return evaluate_compute(kernel.body_of, arrays)
    if isinstance(kernel, Contraction):
        return run_contraction(kernel.contraction, arrays, host)
    if isinstance(kernel, Scatter):
        return run_scatter(kernel.scatter, arrays, kernel.tensor.name)
    if isinstance(kernel, View):
        return ViewOf(kernel.strides)(arrays)
    raise NotImplementedError(kernel.kind)
