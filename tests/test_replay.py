"""Replayed contractions on the compiled target (``backends/cpu/replay.py``).

A contraction's products and copies are recorded on its first call with a layout and made
again at new addresses on later calls. Each case runs the compiled program on three sets
of inputs (record, replay, replay of the first set again) and compares every result with
the NumPy backend; cases whose general path does only products and copies must have been
replayed, the others (a scaled product, an accumulated one) must say why they were not.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler
from tegrad.backends.cpu.replay import ReplayedContraction, data_address

pytestmark = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")


def _matmul(dtype):
    A = tg.placeholder((64, 48), dtype, "A")
    B = tg.placeholder((48, 80), dtype, "B")
    k = tg.reduce_axis((0, 48), "k")
    C = tg.compute((64, 80), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B], C


def _batched():
    A = tg.placeholder((3, 40, 48), "float64", "A")
    B = tg.placeholder((3, 48, 50), "float64", "B")
    k = tg.reduce_axis((0, 48), "k")
    C = tg.compute((3, 40, 50), lambda b, i, j: tg.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    return [A, B], C


def _conv(stride):
    X = tg.placeholder((2, 8, 12, 12), "float32", "X")
    W = tg.placeholder((8, 8, 3, 3), "float32", "W")
    return [X, W], tg.nn.conv2d(X, W, stride=stride, padding=1)


def _small_images():  # ResNet-18's last convolutions in small: 2 x 2 images, 3 x 3 taps
    X = tg.placeholder((4, 16, 2, 2), "float32", "X")
    W = tg.placeholder((16, 16, 3, 3), "float32", "W")
    return [X, W], tg.nn.conv2d(X, W, padding=1)


def _scaled():  # a reduce variable no factor reads: the product is scaled by its extent
    A = tg.placeholder((64, 48), "float64", "A")
    B = tg.placeholder((48, 80), "float64", "B")
    k = tg.reduce_axis((0, 48), "k")
    r = tg.reduce_axis((0, 3), "r")
    C = tg.compute((64, 80), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=[k, r]), name="C")
    return [A, B], C


CASES = {  # name: (builder, every contraction replayed)
    "matmul float32": (lambda: _matmul("float32"), True),
    "matmul float64": (lambda: _matmul("float64"), True),
    "batched matmul": (_batched, True),
    "conv2d stride 1": (lambda: _conv(1), True),
    "conv2d stride 2": (lambda: _conv(2), True),
    # the images joined to the products' columns, the input gradient through its taps
    # (products._through_taps: a product, then a sum of its shifted views)
    "conv2d of 2 x 2 images": (_small_images, True),
    "scaled product": (_scaled, False),
}


def _program(name):
    build, _ = CASES[name]
    inputs, out = build()
    head = tg.placeholder(out.shape, out.dtype, "H")
    outputs = [out, *tg.gradient(out, inputs, head=head)]
    return [*inputs, head], outputs


def _arrays(placeholders, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape).astype(p.dtype) for p in placeholders]


def _contractions(program):
    return [s for s in program.steps if isinstance(s, ReplayedContraction)]


def _assert_close(got, want, dtype):
    tol = 1e-5 if dtype == "float32" else 1e-12
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())


@pytest.mark.parametrize("name", list(CASES))
def test_replay_matches_numpy(name):
    inputs, outputs = _program(name)
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    assert _contractions(f.program), "the case has no contraction kernel"
    for seed in (1, 2, 1):
        arrays = _arrays(inputs, seed)
        _assert_close(f(*arrays), ref(*arrays), inputs[0].dtype)
    kernels = _contractions(f.program)
    replayed = [s for s in kernels if any(r is not None for r in s.recipes.values())]
    untraced = [why for s in kernels for why in s.untraced.values()]
    if CASES[name][1]:
        assert not untraced and len(replayed) == len(kernels)
    else:  # the forward's product is scaled by NumPy; its gradients are plain products
        assert untraced == ["an operand NumPy computed"]


def _terms_per_product(program) -> list[int]:
    return [len(call.terms) // 2 for s in _contractions(program) for r in s.recipes.values()
            if r is not None for call, _ in r.actions if hasattr(call, "terms")]


LOOPED = {  # name: (dtype, image (H, W), kernel, stride, padding, forward's products)
    "3x3 stride 1 float32": ("float32", (10, 9), 3, 1, 1, 9),
    "3x3 stride 1 float64": ("float64", (10, 9), 3, 1, 1, 9),
    "3x3 stride 2": ("float64", (11, 9), 3, 2, 1, 9),  # phase planes of unequal sizes
    "5x5 stride 2": ("float64", (14, 13), 5, 2, 2, 25),  # offsets beyond the kernel skipped
    "3x3 stride 3": ("float64", (13, 12), 3, 3, 0, 1),  # the planes are K: one product
}


@pytest.mark.parametrize("name", list(LOOPED))
@pytest.mark.parametrize("target", ["cpu", "numpy"])
def test_looped_conv_products_match_torch(name, target):
    """A conv with 16 channels runs its forward (and at stride 1 its input gradient) as
    one product per kernel offset over shifted views (of phase planes at stride > 1,
    ``contraction.phase_split``), recorded and replayed on the compiled target; every
    result against torch in float64."""
    torch = pytest.importorskip("torch")
    dtype, (height, width), kernel, stride, padding, products = LOOPED[name]
    X = tg.placeholder((4, 16, height, width), dtype, "X")
    W = tg.placeholder((16, 16, kernel, kernel), dtype, "W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=padding)
    H = tg.placeholder(Y.shape, dtype, "H")
    f = tg.build([X, W, H], [Y, *tg.gradient(Y, [X, W], head=H)], target=target)
    for seed in (1, 2, 1):
        x, w, h = _arrays([X, W, H], seed)
        tx, tw = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
        ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding)
        want = [ty, *torch.autograd.grad(ty, [tx, tw], torch.tensor(h, dtype=torch.float64))]
        _assert_close(f(x, w, h), [t.detach().numpy() for t in want], dtype)
    if target == "cpu":
        forward = _contractions(f.program)[0]
        assert forward.c.shape == Y.shape
        (recipe,) = forward.recipes.values()
        terms = [len(c.terms) // 2 for c, _ in recipe.actions if hasattr(c, "terms")]
        assert terms == [products]  # one per kernel offset, none reading padding alone
        copies = [np.prod(c.shape) * c.itemsize for c, _ in recipe.actions
                  if not hasattr(c, "terms")]
        assert max(copies) < 1.5 * x.nbytes  # padding or phase planes, no im2col


@pytest.mark.parametrize("op", ["conv3d", "conv_transpose3d"])
@pytest.mark.parametrize("target", ["cpu", "numpy"])
def test_strided_3d_convolutions_loop_their_taps(op, target):
    """A 3-D convolution of stride (1, 2, 2) reads its input's phase planes, whose rows
    and depth do not merge (a plane has a row more than the output): its depth is a batch
    of products, one per tap summed (``products._batch_layout``), not an im2col copy of
    27 times the input; a strided 3-D transposed convolution's input gradient is that
    convolution. Recorded and replayed; every result against torch in float64."""
    torch = pytest.importorskip("torch")
    stride = (1, 2, 2) if op == "conv3d" else 2
    X = tg.placeholder((2, 16, 4, 10, 10), "float64", "X")  # (16 channels: MIN_TERM_DEPTH)
    W = tg.placeholder((16, 16, 3, 3, 3), "float64", "W")
    Y = getattr(tg.nn, op)(X, W, stride=stride, padding=1)
    H = tg.placeholder(Y.shape, "float64", "H")
    f = tg.build([X, W, H], [Y, *tg.gradient(Y, [X, W], head=H)], target=target)
    for seed in (1, 2, 1):
        x, w, h = _arrays([X, W, H], seed)
        tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
        ty = getattr(torch.nn.functional, op)(tx, tw, stride=stride, padding=1)
        want = [ty, *torch.autograd.grad(ty, [tx, tw], torch.tensor(h))]
        _assert_close(f(x, w, h), [t.detach().numpy() for t in want], "float64")
    if target == "cpu":
        steps = _contractions(f.program)
        assert steps and not any(s.untraced for s in steps)
        strided = steps[0] if op == "conv3d" else steps[1]  # (the input gradient)
        (recipe,) = strided.recipes.values()
        assert max(len(c.terms) // 2 for c, _ in recipe.actions if hasattr(c, "terms")) > 1
        copies = [np.prod(c.shape) * c.itemsize for c, _ in recipe.actions
                  if not hasattr(c, "terms")]
        assert max(copies) < 3 * x.nbytes  # phase planes, no im2col


@pytest.mark.parametrize("name", ["batched matmul", "conv2d of 2 x 2 images"])
def test_accumulated_blocks_are_products_adding_into_the_output(monkeypatch, name):
    """A product made in blocks of its reduced axis adds the later blocks into the output,
    with BLAS (``beta = 1``) where it writes the output, else with the copy helper's add
    (``copy.AddCall``: a thin convolution's product is copied into place): every block is
    a recorded product, replayed correctly. Only an operand laid out (copied) is made in
    blocks: the batched matmul, whose operands are views, is one product."""
    from tegrad.backends.cpu.copy import AddCall
    from tegrad.backends.host import products

    monkeypatch.setattr(products, "BLOCK_ELEMENTS", 512)
    inputs, outputs = _program(name)
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    for seed in (1, 2, 3):
        arrays = _arrays(inputs, seed)
        _assert_close(f(*arrays), ref(*arrays), inputs[0].dtype)
    steps = _contractions(f.program)
    assert steps and not any(s.untraced for s in steps)
    blocked = 0
    for step in steps:
        (recipe,) = step.recipes.values()
        calls = [c for c, _ in recipe.actions]
        products_made = [c.accumulate for c in calls if hasattr(c, "terms")]
        adds = sum(isinstance(c, AddCall) for c in calls)
        assert products_made[0] == 0  # the first block writes, the rest add
        blocked += len(products_made) > 1 and (
            products_made == [0] + [1] * (len(products_made) - 1)
            or adds >= len(products_made) - 1)
    assert bool(blocked) == (name != "batched matmul")


@pytest.mark.parametrize("parts", [1, 3])
def test_weight_gradient_overlap_copy_is_replayed(monkeypatch, parts):
    """A stride-1 weight gradient copies its input three times (``_overlap_layout``) and
    runs its three kernel rows as one batch of products, the images as terms; with
    ``overlap_bytes`` at two images' copy, five images go in three parts (2, 2, 1), the
    later parts' products added to the first's with BLAS. Recorded and replayed, equal to
    the NumPy backend's and to the sum written out with ``np.einsum`` in float64."""
    from tegrad.backends.host import products

    X = tg.placeholder((5, 8, 12, 12), "float32", "X")
    W = tg.placeholder((8, 8, 3, 3), "float32", "W")
    Y = tg.nn.conv2d(X, W, padding=1)
    H = tg.placeholder(Y.shape, "float32", "H")
    (dW,) = tg.gradient(Y, [W], head=H)
    image = 4 * 8 * 3 * (12 + 3 - 1) * 12  # (c, s, y + r, x) of one image
    options = tg.Options.from_environment()
    if parts > 1:
        options = options.replace(overlap_bytes=2 * image)
    monkeypatch.setattr(products, "_LOOPED", {})  # (layouts chosen under this limit)
    f = tg.build([X, H], [dW], target="cpu", options=options)
    ref = tg.build([X, H], [dW], target="numpy", options=options)
    for seed in (1, 2, 1):
        x, h = arrays = _arrays([X, H], seed)
        padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = np.stack([np.stack([np.einsum("nkhw,nchw->kc", h, padded[:, :, r:r + 12,
                                                                        s:s + 12])
                                   for s in range(3)], -1) for r in range(3)], -2)
        _assert_close(f(*arrays), [want], "float32")
        _assert_close(f(*arrays), ref(*arrays), "float32")
    (step,) = _contractions(f.program)
    assert not step.untraced
    (recipe,) = step.recipes.values()
    products = [c for c, _ in recipe.actions if hasattr(c, "terms")]
    assert [c.batch for c in products] == [3] * parts  # the kernel rows
    assert [len(c.terms) // 2 for c in products] == ([5] if parts == 1 else [2, 2, 1])
    assert [c.accumulate for c in products] == [0] + [1] * (parts - 1)


def test_a_new_layout_is_recorded_apart():
    inputs, outputs = _program("matmul float64")
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    a, b, h = _arrays(inputs, 3)
    _assert_close(f(a, b, h), ref(a, b, h), "float64")
    fortran = np.asfortranarray(a)  # same values, other strides: its own recording
    _assert_close(f(fortran, b, h), ref(a, b, h), "float64")
    layouts = {key for s in _contractions(f.program) for key in s.recipes}
    assert any(key[0][1] == fortran.strides for key in layouts)
    assert any(key[0][1] == a.strides for key in layouts)


def test_layouts_beyond_the_limit_take_the_general_path(monkeypatch):
    from tegrad.backends.cpu import replay

    monkeypatch.setattr(replay, "MAX_LAYOUTS", 1)
    inputs, outputs = _program("matmul float64")
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    a, b, h = _arrays(inputs, 3)
    for x in (a, np.asfortranarray(a), a[::-1][::-1]):  # the second layout is not recorded
        _assert_close(f(x, b, h), ref(a, b, h), "float64")
    assert all(len(s.recipes) == 1 for s in _contractions(f.program))


def test_the_general_path_sets_the_targets_helpers_where_the_program_did_not(monkeypatch):
    """A program of contractions runs without holding the BLAS at one thread unless it has
    threads of its own (OpenBLAS); a contraction that takes the general path (a layout
    beyond the limit) still makes its products through ``tg_gemm`` on the program's
    threads, not ``np.matmul``."""
    from tegrad.backends.cpu import gemm, replay

    monkeypatch.setattr(replay, "MAX_LAYOUTS", 1)
    inputs, outputs = _program("matmul float64")
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    assert f.program.holds_blas_threads == gemm.blas_threads_shared()
    a, b, h = _arrays(inputs, 3)
    f(a, b, h)  # recorded
    made, real = [], gemm.matmul

    def spy(*args, **kwargs):
        made.append(kwargs.get("threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm, "matmul", spy)
    _assert_close(f(np.asfortranarray(a), b, h), ref(a, b, h), "float64")
    assert made and set(made) == {s.threads for s in _contractions(f.program)}
    made.clear()
    _assert_close(f(a, b, h), ref(a, b, h), "float64")  # replayed: no general path
    assert not made


def test_lstm_step_products_are_replayed():
    """The scan's step program replays its product at every step after the first."""
    x = tg.placeholder((6, 4, 16), "float32", "x")
    h0, c0 = (tg.placeholder((4, 32), "float32", n) for n in ("h0", "c0"))
    w_ih = tg.placeholder((128, 16), "float32", "w_ih")
    w_hh = tg.placeholder((128, 32), "float32", "w_hh")
    b_ih, b_hh = (tg.placeholder((128,), "float32", n) for n in ("b_ih", "b_hh"))
    ps = [x, h0, c0, w_ih, w_hh, b_ih, b_hh]
    out, _, _ = tg.nn.lstm(*ps)
    head = tg.placeholder(out.shape, "float32", "head")
    outputs = [out, *tg.gradient(out, ps, head=head)]
    f = tg.build([*ps, head], outputs, target="cpu")
    ref = tg.build([*ps, head], outputs, target="numpy")
    for seed in (4, 5):
        arrays = _arrays([*ps, head], seed)
        _assert_close(f(*arrays), ref(*arrays), "float32")
    steps = [s for k in f.program.steps if hasattr(k, "steps") for s in _contractions(k)]
    assert steps and all(s.recipes and None not in s.recipes.values() for s in steps)
    assert f.program.holds_blas_threads  # (a scan runs NumPy work between its products)


def test_threads_replay_their_own_workspace():
    inputs, outputs = _program("conv2d stride 1")
    f = tg.build(inputs, outputs, target="cpu")
    ref = tg.build(inputs, outputs, target="numpy")
    sets = [_arrays(inputs, seed) for seed in range(4)]
    want = [ref(*a) for a in sets]
    f(*sets[0])  # recorded here; the other threads replay with their own copies
    errors = []

    def work(k):
        try:
            for _ in range(3):
                _assert_close(f(*sets[k]), want[k], "float32")
        except AssertionError as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_data_address_is_the_arrays_data_pointer():
    for a in (np.zeros(5), np.zeros((4, 6), np.float32)[1:, ::2], np.zeros(3)[::-1]):
        assert data_address(a) == a.ctypes.data



def test_operands_are_located_among_apart_and_overlapping_inputs():
    """The recorder finds each product operand's input by bisection where the inputs'
    spans lie apart (weights), by a scan where two overlap (views of one array): a
    recorded layout replayed on new arrays gives NumPy's values both ways."""
    from tegrad.backends.cpu.replay import Recorder

    rng = np.random.default_rng(5)
    a, b, c = (tg.placeholder((6, 6), "float64", name) for name in "abc")
    outs = [tg.nn.matmul(a, b), tg.nn.matmul(b, c), tg.nn.matmul(c, a)]
    f = tg.build([a, b, c], outs, target="cpu")
    ref = tg.build([a, b, c], outs, target="numpy")
    base = rng.standard_normal((8, 6))
    for arrays in ([rng.standard_normal((6, 6)) for _ in range(3)],
                   [base[:6], base[1:7], base[2:]],  # overlapping views of one array
                   [rng.standard_normal((6, 6)) for _ in range(3)]):
        for got, want in zip(f(*arrays), ref(*arrays), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    weights = [np.zeros(4), np.zeros((3, 5)), np.zeros(7)]
    apart = Recorder(weights, None, 1, (0, 0))
    assert apart.starts is not None
    for k, w in enumerate(weights):
        assert apart._locate(w.ctypes.data + 8) == (k, 8)
    assert apart.why is None
    together = Recorder([base[:6], base[1:7]], None, 1, (0, 0))
    assert together.starts is None
    together._locate(base[1:7].ctypes.data)  # in both spans: said, not guessed
    assert together.why == "an operand in two buffers"


# (batch, hidden) -> the layout of the forward step's h W^T on 2 threads, float32, AVX-512:
# rows split over the threads (8 rows each or more, W^T at most 1 MiB), else columns (128
# or more each), else MKL's pack
_WEIGHT_LAYOUTS = {(16, 32): ("RowsGemm", 1), (8, 64): ("RowsGemm", 0),
                   (8, 32): ("PackedGemm", None)}


@pytest.fixture(params=["kernel", "blas"])
def term_kernel_choice(request, reread_environment):
    """The process's BLAS made again with ``term_kernel``'s kernel wanted or not
    (``TEGRAD_TERM_KERNEL``), whatever this processor's default; restored after."""
    from tegrad.backends.cpu import gemm

    reread_environment.setenv("TEGRAD_TERM_KERNEL", "1" if request.param == "kernel" else "0")
    tg.Options.from_environment(refresh=True)
    gemm._blas.cache_clear()
    return request.param


@pytest.mark.parametrize("batch,hidden", list(_WEIGHT_LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["forward", "gradient"])
def test_scan_products_lay_out_their_weight_once_per_run(dtype, mode, batch, hidden,
                                                         monkeypatch, term_kernel_choice):
    """An LSTM step's ``h W^T`` (and the adjoint's ``dpre W``) lay ``W`` out at the first
    step of each run (``packed.py``): in rows for ``term_kernel``'s kernel where it takes
    the product (float32, AVX-512, each thread's block 8 rows and 128 columns or more),
    split by rows where the rows fit a core's cache, else packed by MKL. Results equal the
    NumPy backend's, also after ``W`` changed in place between two calls."""
    from tegrad.backends.cpu import gemm, packed, step_trace

    made = []
    fixed = packed.fixed_operand_product
    monkeypatch.setattr(step_trace, "fixed_operand_product",
                        lambda *args: made.append(fixed(*args)) or made[-1])
    ph = lambda shape, name: tg.placeholder(shape, dtype, name)  # noqa: E731
    x, h0, c0 = ph((7, batch, 8), "x"), ph((batch, hidden), "h0"), ph((batch, hidden), "c0")
    wih, whh = ph((4 * hidden, 8), "wih"), ph((4 * hidden, hidden), "whh")
    out = tg.nn.lstm(x, h0, c0, wih, whh)[0]
    ins = [x, h0, c0, wih, whh]
    if mode == "gradient":
        head = ph(out.shape, "head")
        ins, outs = [*ins, head], [out, *tg.gradient(out, [x, whh], head=head)]
    else:
        outs = [out]
    rng = np.random.default_rng(0)
    arrays = [(0.3 * rng.standard_normal(p.shape)).astype(dtype) for p in ins]
    f = tg.build(ins, outs, target="cpu")
    reference = tg.build(ins, outs, target="numpy")
    for _ in range(3):  # the first call traces the steps; later ones replay them
        for got, want in zip(f(*arrays), reference(*arrays), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-10,
                                       atol=1e-5 if dtype == "float32" else 1e-12)
        arrays[4] *= 1.5  # whh changed in place: the next run lays it out again
    kinds = [type(p).__name__ if p is not None else None for p in made]
    assert len(made) == (2 if mode == "gradient" else 1)
    kind, by_rows = _WEIGHT_LAYOUTS[batch, hidden]
    assert gemm._blas().direct_terms == (term_kernel_choice == "kernel")
    threads = tg.Options.from_environment().machine.threads
    if dtype == "float32" and gemm._blas().direct and threads == 2:
        if kind == "RowsGemm":  # h W^T, W stored transposed
            assert kinds[0] == kind and made[0].call.by_rows == by_rows, kinds
        elif gemm.blas_name() == "mkl":
            assert kinds[0] == kind, kinds
    elif dtype == "float64" and gemm.blas_name() == "mkl":
        assert kinds[0] == "PackedGemm", kinds
    if gemm.blas_name() == "mkl" and mode == "gradient":
        assert kinds[1] == "PackedGemm", kinds  # dpre W: W in rows already, 4 hidden deep


def _record_step_loops(monkeypatch) -> list:
    from tegrad.backends.cpu import step_loop

    made = []
    make = step_loop.StepLoop.make
    monkeypatch.setattr(step_loop.StepLoop, "make", classmethod(
        lambda cls, *args: made.append(make(*args)) or made[-1]))
    return made


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scan_steps_after_the_first_run_in_one_c_call(dtype, monkeypatch):
    """An LSTM's forward scan and its adjoint run their steps in one C call each
    (``step_loop.py``: rows of the histories, the inputs' rows, kept step values written
    in reversed time, the trace's products, packs and kernels), and give the NumPy
    backend's values, also after a weight changed in place between two calls."""
    made = _record_step_loops(monkeypatch)
    ph = lambda shape, name: tg.placeholder(shape, dtype, name)  # noqa: E731
    x, h0, c0 = ph((6, 16, 8), "x"), ph((16, 64), "h0"), ph((16, 64), "c0")
    wih, whh = ph((256, 8), "wih"), ph((256, 64), "whh")
    out = tg.nn.lstm(x, h0, c0, wih, whh)[0]
    head = ph(out.shape, "head")
    ins = [x, h0, c0, wih, whh, head]
    outs = [out, *tg.gradient(out, [x, h0, c0, wih, whh], head=head)]
    rng = np.random.default_rng(1)
    arrays = [(0.3 * rng.standard_normal(p.shape)).astype(dtype) for p in ins]
    f = tg.build(ins, outs, target="cpu")
    reference = tg.build(ins, outs, target="numpy")
    for _ in range(3):
        for got, want in zip(f(*arrays), reference(*arrays), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-10,
                                       atol=1e-5 if dtype == "float32" else 1e-12)
        arrays[4] *= 1.5
    # per scan: the first call's first step makes the trace, its second lays the weight
    # out, its third loops; a later call's first step lays the weight out again (the try
    # at its start is refused), its second loops
    assert [loop is not None for loop in made] == [False, True] * 6


def test_scan_step_loop_reads_the_time_and_zero_rows():
    """A step reading ``t`` itself and an input row past the input's end (zeros), in the
    C loop as in the NumPy backend."""
    x = tg.placeholder((6, 3), "float64", "x")
    s = tg.placeholder((6, 3), "float64", "s")
    init = tg.compute((1, 3), lambda r, i: x[r, i], name="init")
    update = tg.compute((6, 3), lambda t, i: 0.5 * s[t - 1, i] + x[t, i] * t
                        + tg.if_then_else(t + 2 < 6, x[t + 2, i], 0.0), name="update")
    out = tg.scan(init, update, s, name="timed")
    f = tg.build([x], out, target="cpu")
    arrays = np.random.default_rng(2).standard_normal((6, 3))
    np.testing.assert_allclose(f(arrays), tg.build([x], out, target="numpy")(arrays),
                               rtol=1e-12, atol=1e-12)


def test_scan_step_loop_raises_a_kernels_gather_error(monkeypatch):
    """A gather index out of range at a step that the C loop runs raises the kernel's
    error, as the first (Python) step would."""
    made = _record_step_loops(monkeypatch)
    E = tg.placeholder((5, 3), "float64", "E")
    idx = tg.placeholder((6,), "int64", "idx")
    s = tg.placeholder((6, 3), "float64", "s")
    init = tg.compute((1, 3), lambda r, i: E[0, i], name="init")
    update = tg.compute((6, 3), lambda t, i: s[t - 1, i] + E[idx[t], i], name="walk")
    f = tg.build([E, idx], tg.scan(init, update, s, name="walks"), target="cpu")
    e = np.arange(15.0).reshape(5, 3)
    good = np.array([0, 1, 2, 3, 4, 0])
    np.testing.assert_allclose(f(e, good), np.cumsum(e[good], axis=0))
    assert made and made[-1] is not None
    with pytest.raises(IndexError, match=r"gather E\[\.\.\.\] index 0 got value 9"):
        f(e, np.array([0, 1, 2, 3, 9, 0]))
