"""The targets tegrad ships, registered fastest first (``target.py``)."""

from .cpu.target import CpuTarget
from .reference.program import NumpyTarget
from .target import register

register(CpuTarget())
register(NumpyTarget())
