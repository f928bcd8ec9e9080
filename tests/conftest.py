"""Shared pytest setup: Hypothesis profiles, and the disk cache of generated programs off.

Tests that patch differentiation or planning must see their patch, not a program a
previous run stored (``cache/disk.py``); the cache's own tests turn it on, each with a
new directory. ``TEGRAD_GRAPH_CACHE=1 pytest`` runs every test with it on. Without an
NVIDIA GPU, ``TRITON_INTERPRET=1``: the cuda target's tests run in Triton's interpreter.

Profiles (pick with the environment variable HYPOTHESIS_PROFILE):
  default / ci  150 examples per property, no deadline (kernels compile on first use),
                derandomized: the same examples on every run, so that a commit passes or
                fails on its own code, never on the draw
  explore       as default, with fresh random examples on each run
  long          10000 fresh random examples per property (``make fuzz``): the search for
                new failures, whose programs then become regression tests
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

settings.register_profile("default", max_examples=150, derandomize=True, **_COMMON)
settings.register_profile("ci", max_examples=150, derandomize=True, **_COMMON)
settings.register_profile("explore", max_examples=150, **_COMMON)
settings.register_profile("long", max_examples=10_000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
os.environ.setdefault("TEGRAD_GRAPH_CACHE", "0")
# the cuda target's kernels run in Triton's interpreter where there is no NVIDIA GPU (read
# when triton decorates a kernel, so before any test imports it)
from tegrad.backends.cuda.device import driver_present  # noqa: E402 (imports no triton)

if not driver_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def reread_environment(monkeypatch):
    """``monkeypatch`` for a test that changes ``TEGRAD_*`` variables: after it, they are
    restored and ``tg.Options`` (and the BLAS chosen from it) read again, so later tests
    see the process's own."""
    yield monkeypatch
    monkeypatch.undo()
    import tegrad as tg
    from tegrad.backends.cpu import gemm

    tg.Options.from_environment(refresh=True)
    gemm._blas.cache_clear()
