"""The op-spec table, one module per family of ``tg.nn`` ops; importing fills ``CASES``."""

from . import (  # noqa: F401
    activation,
    arithmetic,
    attention,
    convolution,
    dropout,
    indexing,
    linalg,
    loss,
    normalization,
    pooling,
    recurrent,
    reduction,
    resampling,
    shape,
    softmax,
)
