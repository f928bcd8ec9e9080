"""Compiled kernels found by their structure (``backends/cpu/kernel_cache.py``).

- Kernels whose C is the same up to their names (the identical blocks of a network) are
  one compiled function: a program of three identical layers compiles each distinct
  kernel once, in one gcc run, and gives the NumPy reference's values.
- A second program sharing kernels with a first, in a new process, compiles only its new
  ones and loads the others from the first's libraries; a program seen before compiles
  none.
- A damaged index entry is warned about once, compiled again and rewritten; a damaged
  library named by several entries is warned about once and compiled again once.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler, kernel_cache
from tegrad.errors import CacheWarning

needs_gcc = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
F32 = "float32"


def layers(count: int, head: str | None = None):
    """``(inputs, outputs)``: ``count`` identical layers (linear, layer norm, gelu) on X
    and the gradients of their sum of squares (``head``: a softmax on top, new kernels)."""
    x = tg.placeholder((32, 24), F32, "X")
    weights = [tg.placeholder((24, 24), F32, f"W{k}") for k in range(count)]
    h = x
    for w in weights:
        h = tg.nn.gelu(tg.nn.layer_norm(tg.nn.linear(h, w), (24,)))
    if head == "softmax":
        h = tg.nn.softmax(h, -1)
    loss = tg.nn.sum(h * h)
    return [x, *weights], [loss, *tg.gradient(loss, [x, *weights])]


def arrays(inputs):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(p.shape).astype(F32) for p in inputs]


def distinct(outputs) -> set:
    """The keys of the distinct general kernels of ``outputs`` on the cpu target."""
    from tegrad.backends.cpu.program import blueprint
    from tegrad.lower.plan import plan

    return {kernel_cache.kernel_key(k.text, k.name)[0]
            for k in blueprint(plan(list(outputs), fused=True)).texts()}


@pytest.fixture
def new_process(tmp_path, reread_environment, monkeypatch):
    """A new cache directory, and a function that forgets what this process compiled and
    loaded (as a new process would) and clears the counters."""
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path))

    def forget():
        monkeypatch.setattr(compiler, "_LOADED", {})
        monkeypatch.setattr(compiler, "_DAMAGED", set())
        monkeypatch.setattr(kernel_cache, "_WHERE", {})
        kernel_cache.STATS.clear()
        compiler.STATS.clear()

    forget()
    return forget


def build_and_check(inputs, outputs):
    values = arrays(inputs)
    got = tg.build(inputs, outputs, target="cpu")(*values)
    want = tg.build(inputs, outputs, target="numpy")(*values)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


@needs_gcc
def test_identical_kernels_compile_once(new_process):
    from tegrad.backends.cpu.call_extension import extension
    from tegrad.backends.cpu.copy import helper as copy_helper
    from tegrad.backends.cpu.gemm import helper as gemm_helper
    from tegrad.backends.cpu.kernel_call import CompiledKernel

    extension(), copy_helper(), gemm_helper()  # (built first: not counted below)
    compiler.STATS.clear()
    inputs, outputs = layers(3)
    f = tg.build(inputs, outputs, target="cpu")
    kernels = [s for s in f.program.steps if isinstance(s, CompiledKernel)]
    keys = distinct(outputs)
    assert len(kernels) >= 2 * len(keys)  # three layers: most kernels come three times
    assert kernel_cache.STATS["kernels compiled"] == len(keys)
    assert compiler.STATS["gcc runs"] == 1  # small: one translation unit
    build_and_check(inputs, outputs)


@needs_gcc
def test_a_second_program_compiles_only_its_new_kernels(new_process):
    first_inputs, first = layers(2)
    build_and_check(first_inputs, first)
    first_keys = distinct(first)
    assert kernel_cache.STATS["kernels compiled"] == len(first_keys)

    new_process()
    second_inputs, second = layers(3, head="softmax")
    build_and_check(second_inputs, second)
    new = distinct(second) - first_keys
    assert new and len(new) < len(distinct(second))
    assert kernel_cache.STATS["kernels compiled"] == len(new)
    assert set(compiler._LOADED) > set()  # the first program's libraries, from the disk

    new_process()
    build_and_check(second_inputs, second)
    assert kernel_cache.STATS["kernels compiled"] == 0 and compiler.STATS["gcc runs"] == 0


@needs_gcc
def test_a_damaged_index_entry_is_compiled_again(new_process, tmp_path):
    inputs, outputs = layers(1)
    build_and_check(inputs, outputs)
    entries = sorted((tmp_path / "cpu").glob("*.kernel"))
    entries[0].write_text("garbage")
    new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_and_check(inputs, outputs)
    (warning,) = caught
    assert warning.category is CacheWarning and str(entries[0]) in str(warning.message)
    assert kernel_cache.STATS["kernels compiled"] == 1
    assert entries[0].read_text() != "garbage" and len(entries) == len(
        list((tmp_path / "cpu").glob("*.kernel")))
    assert (tmp_path / "cpu" / f"{entries[0].read_text().strip()}.so").exists()


@needs_gcc
def test_a_damaged_library_is_warned_about_and_compiled_once(new_process, tmp_path):
    inputs, outputs = layers(2)
    build_and_check(inputs, outputs)
    named = {e.read_text().strip() for e in (tmp_path / "cpu").glob("*.kernel")}
    assert len(named) == 1  # every kernel in one library: several entries name it
    library = tmp_path / "cpu" / f"{named.pop()}.so"
    size = library.stat().st_size
    cut = tmp_path / "cut.so"  # a new file: this process has the whole one mapped
    cut.write_bytes(library.read_bytes()[:100])
    os.replace(cut, library)
    new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_and_check(inputs, outputs)
    (warning,) = caught
    assert warning.category is CacheWarning and str(library) in str(warning.message)
    assert compiler.STATS["gcc runs"] == 1 and library.stat().st_size == size
