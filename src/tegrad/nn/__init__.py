"""The operator library: layers written as tensor expressions, their backward generated.

Every function is named and called like its ``torch.nn.functional`` counterpart (or its
``torch`` one where F has none): same positional and keyword arguments and defaults,
NCHW layouts, ``reduction=`` modes. They take tensors and return tensors built with
``tg.compute``; no backward is written by hand (``tg.gradient`` makes it). One module per
family; ``tegrad.coverage.table`` holds a PyTorch-checked case for every function. They
know nothing of eager use: ``tegrad/__init__.py`` wraps every function here so that it
also runs on ``tg.Variable`` arguments (``eager.wrap_namespace``).
"""

import importlib

from .activation import *  # noqa: F403
from .attention import *  # noqa: F403
from .convolution import *  # noqa: F403
from .dropout import *  # noqa: F403
from .indexing import *  # noqa: F403
from .linalg import *  # noqa: F403
from .loss import *  # noqa: F403
from .normalization import *  # noqa: F403
from .pooling import *  # noqa: F403
from .recurrent import *  # noqa: F403
from .reduction import *  # noqa: F403
from .resampling import *  # noqa: F403
from .shape import *  # noqa: F403
from .softmax import *  # noqa: F403

# the modules themselves (``softmax`` and ``dropout`` are also the names of functions)
_FAMILIES = tuple(importlib.import_module(f"{__name__}.{family}") for family in (
    "activation", "attention", "convolution", "dropout", "indexing", "linalg", "loss",
    "normalization", "pooling", "recurrent", "reduction", "resampling", "shape", "softmax"))
__all__ = sorted({name for family in _FAMILIES for name in family.__all__})
del importlib
