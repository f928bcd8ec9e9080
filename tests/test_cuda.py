"""The cuda target (Triton kernels) against the NumPy reference.

Without a GPU (CI) the kernels run in Triton's interpreter on CPU tensors
(``TRITON_INTERPRET=1``, set by ``conftest.py``); on a machine with an NVIDIA GPU the same
tests run the compiled kernels on it. Every op of the op table (forward and gradients),
random programs (forward, gradient and every intermediate compute), every coverage case
of the ``tg.nn`` ops, and recurrences give the reference's values; the generator's rules
(floor division, NaN through max and min, int64 offsets, checked gathers, deterministic
scatters) each have a test; calls take and give torch tensors or NumPy arrays; and every
kernel the op table generates compiles for sm_90 (the H200) on this machine, which
catches what the interpreter lets through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

try:
    from .optable import SPECS
    from .programs import programs
    from .test_cpu import agrees_on_op, agrees_on_program, assert_agree
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from optable import SPECS
    from programs import programs
    from test_cpu import agrees_on_op, agrees_on_program, assert_agree

from tegrad.backends.cuda import device  # noqa: E402
from tegrad.coverage import CASES  # noqa: E402
from tegrad.coverage.agreement import head_values, run_tegrad, trace  # noqa: E402

pytestmark = pytest.mark.skipif(device.unavailable() is not None,
                                reason=str(device.unavailable()))

RTOL = 1e-9  # of the largest magnitude: float64, other summation orders


def cuda_and_reference(inputs, outputs, arrays):
    want = tg.build(inputs, outputs, target="numpy")(*arrays)
    got = tg.build(inputs, outputs, target="cuda")(*arrays)
    return got, want


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_op_table_forward_and_gradients(spec):
    agrees_on_op(spec, cuda_and_reference, RTOL)


@settings(max_examples=30, deadline=None)
@given(program=programs(), seed=st.integers(0, 2**32 - 1))
def test_random_programs(program, seed):
    agrees_on_program(program, seed, cuda_and_reference)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_coverage_cases(case):
    """Every case of every ``tg.nn`` op, forward and gradients, at its test shapes."""
    rng = np.random.default_rng(0)
    arrays = case.inputs(rng)
    graph = trace(case, arrays)
    heads = head_values(graph, rng)
    want = run_tegrad(graph, arrays, heads, target="numpy")
    got = run_tegrad(graph, arrays, heads, target="cuda")
    assert_agree(got[0] + got[1], want[0] + want[1], case.name, RTOL)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_recurrences_forward_and_gradients(kind):
    try:
        from .test_scan import recurrent_case
    except ImportError:
        from test_scan import recurrent_case

    out, placeholders, values, _ = recurrent_case(kind, 5, 3, 4, 6, 7)
    head = tg.placeholder(out.shape, "float64", name="dout")
    outputs = [out, *tg.gradient(out, placeholders, head=head)]
    dout = np.random.default_rng(8).standard_normal(out.shape)
    arrays = [values[p] for p in placeholders] + [dout]
    got, want = cuda_and_reference([*placeholders, head], outputs, arrays)
    assert_agree(got, want, kind, RTOL)


# -- the generator's rules --------------------------------------------------------------

def test_floor_division_and_modulo_of_negative_operands():
    a = tg.placeholder((7, 5), "int64", "a")
    b = tg.placeholder((5,), "int64", "b")
    q = tg.compute((7, 5), lambda i, j: a[i, j] // b[j], "q")
    r = tg.compute((7, 5), lambda i, j: a[i, j] % b[j], "r")
    index = tg.compute((7, 5), lambda i, j: (i - 3) // 2 + (j - 2) % 3, "index")
    ints = np.arange(-17, 18).reshape(7, 5)
    divisors = np.array([-3, -2, 2, 3, 7])
    got, want = cuda_and_reference([a, b], [q, r, index], [ints, divisors])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[0], ints // divisors)
    np.testing.assert_array_equal(got[1], ints % divisors)


def test_nan_goes_through_max_and_min():
    x = tg.placeholder((4, 6), "float32", "x")
    k = tg.reduce_axis((0, 6), "k")
    rows = tg.compute((4,), lambda i: tg.max(x[i, k], axis=k), "rows")
    k2 = tg.reduce_axis((0, 6), "k2")
    low = tg.compute((4,), lambda i: tg.min(x[i, k2], axis=k2), "low")
    pair = tg.compute((4, 6), lambda i, j: tg.maximum(x[i, j], 0.5), "pair")
    values = np.arange(24, dtype="float32").reshape(4, 6)
    values[1, 3] = np.nan
    values[2, 0] = np.nan
    got, want = cuda_and_reference([x], [rows, low, pair], [values])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert np.isnan(got[0][1]) and np.isnan(got[1][2]) and np.isnan(got[2][1, 3])


def test_offsets_are_int64_from_2_to_the_31_elements():
    from tegrad.backends.cuda.codegen import general_text

    for n, wide in ((1 << 20, False), (1 << 31, True)):
        x = tg.placeholder((n,), "float32", "x")
        y = tg.compute((4,), lambda i, x=x: x[i * 1000] * 2.0, "y")
        text = general_text("k", y)
        assert text.wide == wide
        assert ("tl.program_id(0).to(tl.int64)" in text.text) == wide


def test_a_bad_gather_index_raises_as_the_reference_does():
    E = tg.placeholder((5, 3), "float64", "E")
    idx = tg.placeholder((4,), "int64", "idx")
    out = tg.compute((4, 3), lambda i, j: E[idx[i], j], "rows")
    f = tg.build([E, idx], out, target="cuda")
    e = np.arange(15.0).reshape(5, 3)
    np.testing.assert_array_equal(f(e, np.array([4, 0, 2, 2])), e[[4, 0, 2, 2]])
    with pytest.raises(IndexError, match=r"rows: gather E\[\.\.\.\] index 0 got value 7"):
        f(e, np.array([1, 7, 0, 0]))
    with pytest.raises(IndexError, match=r"rows: gather E\[\.\.\.\] index 0 got value -1"):
        f(e, np.array([1, 0, -1, 0]))


def test_a_guarded_gather_is_checked_only_where_its_guard_holds():
    E = tg.placeholder((5, 3), "float64", "E")
    idx = tg.placeholder((4,), "int64", "idx")
    out = tg.compute((4, 3), lambda i, j: tg.if_then_else(
        tg.not_equal(idx[i], -100), E[idx[i], j], 0.0), "rows")
    ids = np.array([4, -100, 2, -100])
    got, want = cuda_and_reference([E, idx], [out], [np.arange(15.0).reshape(5, 3), ids])
    np.testing.assert_array_equal(got[0], want[0])


def test_scatters_match_the_reference_and_are_bitwise_repeatable():
    E = tg.placeholder((50, 16), "float32", "E")
    idx = tg.placeholder((3000,), "int64", "idx")
    out = tg.compute((3000, 16), lambda i, j: E[idx[i], j], "emb")
    H = tg.placeholder(out.shape, "float32", "H")
    grads = tg.gradient(out, [E], H)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((50, 16)).astype("float32"), rng.integers(0, 40, 3000),
            rng.standard_normal((3000, 16)).astype("float32")]
    f = tg.build([E, idx, H], grads, target="cuda")
    assert any(k.kind == "scatter" for k in f.program.plan.kernels)
    first = f(*args)[0]
    want = tg.build([E, idx, H], grads, target="numpy")(*args)[0]
    np.testing.assert_array_equal(first, want)  # float64 sums in grid order, as bincount
    assert not first[40:].any()
    for _ in range(2):
        np.testing.assert_array_equal(f(*args)[0], first)


# -- the API --------------------------------------------------------------------------

def _softmax_program():
    x = tg.placeholder((8, 16), "float32", "x")
    y = tg.nn.softmax(x, -1)
    h = tg.placeholder(y.shape, "float32", "h")
    return [x, h], [y, *tg.gradient(y, [x], h)]


def test_tensors_in_give_tensors_out_arrays_in_give_arrays_out():
    inputs, outputs = _softmax_program()
    f = tg.build(inputs, outputs, target="cuda")
    rng = np.random.default_rng(1)
    x, h = (rng.standard_normal((8, 16)).astype("float32") for _ in range(2))
    arrays = f(x, h)
    assert all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays)
    tensors = f(torch.from_numpy(x).to(device.device()), torch.from_numpy(h).to(device.device()))
    assert all(isinstance(t, torch.Tensor) and t.device == device.device() for t in tensors)
    for a, t in zip(arrays, tensors, strict=True):
        np.testing.assert_array_equal(a, t.cpu().numpy())
    ref = torch.softmax(torch.from_numpy(x.astype("float64")), -1).numpy()
    np.testing.assert_allclose(arrays[0], ref, rtol=1e-5, atol=1e-7)


def test_bad_inputs_are_refused_naming_the_placeholder():
    inputs, outputs = _softmax_program()
    f = tg.build(inputs, outputs, target="cuda")
    with pytest.raises(ValueError, match="placeholder x: expected shape"):
        f(torch.zeros(8, 15), torch.zeros(8, 16))
    with pytest.raises(TypeError, match="placeholder x: expected dtype float32"):
        f(torch.zeros(8, 16, dtype=torch.int64), torch.zeros(8, 16))
    with pytest.raises(TypeError, match="expected 2 arrays"):
        f(torch.zeros(8, 16))


def test_target_none_takes_cuda_only_on_a_gpu_and_passes_it_over_silently():
    inputs, outputs = _softmax_program()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = tg.build(inputs, outputs)
    assert f.target == ("cpu" if device.interpreting() else "cuda")


# -- compiled for the H200 without one --------------------------------------------------

COMPILE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import tegrad as tg
from optable import SPECS
from tegrad.backends.cuda.compiler import compile_for
from tegrad.backends.cuda.program import blueprint, fused
from tegrad.lower.plan import plan
report = []
for spec in SPECS:
    inputs, out = spec.build()
    head = tg.placeholder(out.shape, out.dtype, name="H")
    outputs = [out, *tg.gradient(out, [inputs[k] for k in spec.diff], head=head)]
    options = tg.Options.from_environment()
    for text in blueprint(fused(plan(outputs, options=options), options)).texts():
        ptx = compile_for(text).asm["ptx"]
        report.append([spec.name, text.name, len(ptx), "tf32" in ptx])
x = tg.placeholder((6, 3, 40, 30), "float32", "x")  # a reduction made in splits
n, h, w = (tg.reduce_axis(e, name) for e, name in ((6, "n"), (40, "h"), (30, "w")))
sums = tg.compute((3,), lambda c: tg.sum(x[n, c, h, w], axis=[n, h, w]), "sums")
(text,) = blueprint(fused(plan([sums], options=options), options)).texts()
assert text.splits > 1
ptx = compile_for(text).asm["ptx"]
report.append(["split sums", text.name, len(ptx), "tf32" in ptx])
print(json.dumps(report))
"""


def test_every_op_table_kernel_compiles_for_sm_90(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "TEGRAD_CACHE_DIR": str(tmp_path / "tegrad")}
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", COMPILE, str(here)], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name for name, *_ in report} == {s.name for s in SPECS} | {"split sums"}
    assert all(size > 0 and not tf32 for _, _, size, tf32 in report)


# -- PyTorch ------------------------------------------------------------------------------

def test_to_torch_on_the_cuda_target_with_double_backward():
    conv = tg.to_torch(tg.nn.conv2d, target="cuda")
    where = device.device()
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.standard_normal((1, 2, 4, 4)), device=where, requires_grad=True)
    w = torch.tensor(rng.standard_normal((1, 2, 3, 3)), device=where, requires_grad=True)
    y = conv(x, w, stride=2, padding=1)
    assert y.device == where
    ref = torch.nn.functional.conv2d(x.detach().cpu(), w.detach().cpu(), stride=2, padding=1)
    np.testing.assert_allclose(y.detach().cpu().numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: conv(a, b, stride=2, padding=1), (x, w))
    assert torch.autograd.gradgradcheck(lambda a, b: conv(a, b, stride=2, padding=1), (x, w))


def test_to_torch_refuses_a_tensor_off_the_targets_device():
    with pytest.raises(ValueError, match="target must be None or 'cuda'"):
        tg.to_torch(tg.nn.relu, target="gpu")
    if device.interpreting():
        meta = torch.zeros(3, device="meta")
        with pytest.raises(ValueError, match="the cuda target runs on cpu"):
            tg.to_torch(tg.nn.relu, target="cuda")(meta)


def test_build_vjp_keeps_tensors_on_the_device():
    x = tg.placeholder((8, 16), "float32", "x")
    forward, backward = tg.build_vjp([x], tg.nn.softmax(x, -1), target="cuda")
    rng = np.random.default_rng(2)
    a, h = (rng.standard_normal((8, 16)).astype("float32") for _ in range(2))
    where = device.device()
    y, saved = forward(torch.from_numpy(a).to(where))
    (dx,) = backward(saved, torch.from_numpy(h).to(where))
    assert isinstance(y, torch.Tensor) and isinstance(dx, torch.Tensor) and dx.device == where
    ref_forward, ref_backward = tg.build_vjp([x], tg.nn.softmax(x, -1), target="numpy")
    ref_y, ref_saved = ref_forward(a)
    np.testing.assert_allclose(y.cpu().numpy(), ref_y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dx.cpu().numpy(), ref_backward(ref_saved, h)[0], rtol=1e-5,
                               atol=1e-6)


# -- contractions on the device's BLAS ----------------------------------------------------

def _ph(shape, name):
    return tg.placeholder(shape, "float64", name)


BLAS_LAYERS = {  # large enough that the plan keeps their products as contractions
    "matmul": ([(48, 40), (40, 56)], lambda a, b: tg.nn.matmul(a, b)),
    "batched_matmul": ([(4, 24, 32), (4, 32, 20)], lambda a, b: tg.nn.matmul(a, b)),
    "linear": ([(32, 64), (48, 64), (48,)], lambda x, w, b: tg.nn.linear(x, w, b)),
    "conv2d": ([(2, 8, 12, 12), (8, 8, 3, 3)], lambda x, w: tg.nn.conv2d(x, w, padding=1)),
    "conv2d_stride_2": ([(2, 8, 12, 12), (16, 8, 3, 3)],
                        lambda x, w: tg.nn.conv2d(x, w, stride=2, padding=1)),
    "conv2d_1x1_stride_2": ([(4, 16, 12, 12), (32, 16, 1, 1)],
                            lambda x, w: tg.nn.conv2d(x, w, stride=2)),
    "conv_transpose2d": ([(2, 16, 8, 8), (16, 8, 3, 3)], lambda x, w: tg.nn.conv_transpose2d(
        x, w, stride=2, padding=1, output_padding=1)),
    "attention": ([(2, 16, 32)] * 3, lambda q, k, v: tg.nn.scaled_dot_product_attention(q, k, v)),
}


@pytest.mark.parametrize("products", [True, False], ids=["einsum", "kernels"])
@pytest.mark.parametrize("name", list(BLAS_LAYERS))
def test_contractions_as_einsums_and_as_kernels(name, products):
    shapes, layer = BLAS_LAYERS[name]
    inputs = [_ph(s, f"x{k}") for k, s in enumerate(shapes)]
    out = layer(*inputs)
    head = tg.placeholder(out.shape, out.dtype, "H")
    outputs = [out, *tg.gradient(out, inputs, head=head)]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(p.shape) for p in [*inputs, head]]
    options = tg.Options.from_environment().replace(cuda_products=products)
    f = tg.build([*inputs, head], outputs, target="cuda", options=options)
    made = [step for step in f.program.steps if type(step).__name__ == "Product"]
    assert bool(made) == products
    want = tg.build([*inputs, head], outputs, target="numpy")(*arrays)
    assert_agree(f(*arrays), want, name, RTOL)


def test_each_kernel_reports_its_own_bad_gather():
    E = tg.placeholder((5, 3), "float64", "E")
    F = tg.placeholder((4, 3), "float64", "F")
    idx = tg.placeholder((4,), "int64", "idx")
    jdx = tg.placeholder((4,), "int64", "jdx")
    rows = tg.compute((4, 3), lambda i, j: E[idx[i], j], "rows")
    cols = tg.compute((4, 3), lambda i, j: tg.exp(F[jdx[i], j]), "cols")
    f = tg.build([E, F, idx, jdx], [rows, cols], target="cuda")
    assert len([k for k in f.program.plan.kernels if k.kind == "general"]) == 2
    e, g = np.zeros((5, 3)), np.zeros((4, 3))
    with pytest.raises(IndexError, match=r"cols: gather F\[\.\.\.\] index 0 got value 9"):
        f(e, g, np.array([0, 1, 2, 3]), np.array([0, 9, 0, 0]))
    with pytest.raises(IndexError, match=r"rows: gather E\[\.\.\.\] index 0 got value -2"):
        f(e, g, np.array([0, -2, 2, 3]), np.array([0, 1, 0, 0]))
    np.testing.assert_array_equal(f(e, g, np.array([4, 1, 2, 3]), np.array([3, 1, 0, 0]))[1],
                                  np.ones((4, 3)))


def test_to_torch_backward_on_the_cuda_target_reuses_what_the_forward_kept(monkeypatch):
    from tegrad.backends.vjp import SplitVJP

    runs = []
    backward = SplitVJP.backward
    monkeypatch.setattr(SplitVJP, "backward",
                        lambda self, *a: runs.append(self.target) or backward(self, *a))
    norm = tg.to_torch(tg.nn.layer_norm, target="cuda")
    rng = np.random.default_rng(4)
    where = device.device()
    x = torch.tensor(rng.standard_normal((6, 10)), device=where, requires_grad=True)
    w = torch.tensor(rng.standard_normal(10), device=where, requires_grad=True)
    y = norm(x, (10,), w)
    (y * y).sum().backward()
    assert runs == ["cuda"]
    ref_x, ref_w = (t.detach().cpu().clone().requires_grad_() for t in (x, w))
    ref = torch.nn.functional.layer_norm(ref_x, (10,), ref_w)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), ref_x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.grad.cpu().numpy(), ref_w.grad.numpy(), rtol=1e-10, atol=1e-12)


# -- whole networks -------------------------------------------------------------------

def test_whole_networks_train_as_torch_does_on_the_cuda_target():
    """ResNet-18 (width 4, 32x32 images) and the two-layer LSTM language model: logits,
    loss and every parameter's gradient against torch in float64."""
    try:
        from .test_networks import compare
        from .torch_models import language_model_pair, resnet_pair
    except ImportError:
        from test_networks import compare
        from torch_models import language_model_pair, resnet_pair

    for pair in (resnet_pair("resnet18", classes=5, width=4, image=32, seed=1),
                 language_model_pair(vocab=11, embed=6, hidden=7, layers=2, steps=5, batch=3,
                                     seed=2)):
        compare(pair.loss, pair.logits, pair.params, pair.feeds, pair.module,
                pair.torch_loss, target="cuda")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_a_large_reduction_over_few_outputs_is_made_in_splits(dtype):
    """A loss (one output) and per-channel statistics (a batch norm's: 3 outputs over
    n, h, w), with a ``where``, a NaN and a max: partials per split, folded in order."""
    x = tg.placeholder((6, 3, 40, 30), dtype, "x")
    n, h, w = (tg.reduce_axis(e, name) for e, name in ((6, "n"), (40, "h"), (30, "w")))
    sums = tg.compute((3,), lambda c: tg.sum(x[n, c, h, w], axis=[n, h, w],
                                             where=tg.not_equal(h, 7)), "sums")
    c2, n2, h2, w2 = (tg.reduce_axis(e, name) for e, name in
                      ((3, "c2"), (6, "n2"), (40, "h2"), (30, "w2")))
    top = tg.compute((), lambda: tg.max(x[n2, c2, h2, w2], axis=[n2, c2, h2, w2]), "top")
    f = tg.build([x], [sums, top], target="cuda")
    splits = [step[0].text.splits for step in f.program.steps]
    assert len(splits) == 2 and min(splits) > 1, splits
    rng = np.random.default_rng(5)
    values = (rng.standard_normal(x.shape) * 10).astype(dtype)
    got, want = f(values), tg.build([x], [sums, top], target="numpy")(values)
    assert_agree(got, want, "split reductions", 1e-6 if dtype == "float32" else RTOL)
    if dtype != "int64":
        values[2, 1, 3, 4] = np.nan
        got = f(values)
        assert np.isnan(got[1]) and np.isnan(got[0][1]) and not np.isnan(got[0][0])


@pytest.mark.parametrize("layer", ["instance norm", "group norm", "softmax over channels"])
def test_row_statistics_over_any_axes_are_made_once_per_row(layer):
    """An instance or group norm's statistics over (h, w) are made once per (n, c) row,
    its h and w along the block's columns; a softmax over NCHW's channels keeps its max and
    sum as kernels of their own (the plan's choice)."""
    x = tg.placeholder((2, 6, 5, 7), "float64", "x")
    y = {"instance norm": lambda: tg.nn.instance_norm(x),
         "group norm": lambda: tg.nn.group_norm(x, 2),
         "softmax over channels": lambda: tg.nn.softmax(x, 1)}[layer]()
    head = tg.placeholder(y.shape, "float64", "h")
    outputs = [y, *tg.gradient(y, [x], head)]
    f = tg.build([x, head], outputs, target="cuda")
    columns = [step[0].text.columns for step in f.program.steps if isinstance(step, tuple)]
    assert max(columns) == (1 if layer == "softmax over channels" else 35), columns
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(x.shape), rng.standard_normal(x.shape)]
    assert_agree(f(*arrays), tg.build([x, head], outputs, target="numpy")(*arrays), layer,
                 RTOL)
