"""The targets tegrad ships, registered fastest first (``target.py``)."""

from .cpu.target import CpuTarget
from .cuda.target import CudaTarget
from .reference.program import NumpyTarget
from .target import register

register(CudaTarget())
register(CpuTarget())
register(NumpyTarget())
