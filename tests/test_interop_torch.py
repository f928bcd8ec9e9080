"""``tg.to_torch``: tegrad ops inside PyTorch autograd, checked against torch itself.

One table of calls drives gradcheck/gradgradcheck (float64) and agreement with the
torch.nn.functional reference (float64 and float32); then training a small model with
SGD and Adam against the same model in torch ops, and DistributedDataParallel (gloo,
2 processes) against one process on the whole batch.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tegrad as tg  # noqa: E402
from tegrad.function import cache_clear, cache_info  # noqa: E402
from tegrad.interop.torch_bridge import as_array, as_module, to_torch  # noqa: E402

# ------------------------------------------------------------------- user-written ops


def linear(x, w, b):
    """``x @ w.T + b`` written with tg.compute."""
    k = tg.reduce_axis(x.shape[1], name="k")
    return tg.compute((x.shape[0], w.shape[0]),
                      lambda i, j: tg.sum(x[i, k] * w[j, k], axis=k) + b[j], name="linear")


def product_and_shift(x, y):
    """Two outputs: ``x * y`` and ``exp(x) - y``."""
    p = tg.compute(x.shape, lambda i, j: x[i, j] * y[i, j], name="product")
    s = tg.compute(x.shape, lambda i, j: tg.exp(x[i, j]) - y[i, j], name="shift")
    return p, s


def double_first(x, y):
    """Reads only ``x``: ``y``'s gradient is zero."""
    return tg.compute(x.shape, lambda i: 2.0 * x[i], name="double")


# ------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Call:
    name: str
    op: Callable  # the tegrad function
    ref: Callable  # its torch counterpart
    call: Callable  # call(op, *tensors): static arguments live here
    inputs: Callable  # inputs(gen) -> tensors, float64 (and integer)


def normal(*shapes):
    return lambda gen: [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]


def embedding_inputs(gen):
    return [torch.tensor([[0, 3, 3], [1, 0, 2]]), torch.randn(4, 3, generator=gen,
                                                              dtype=torch.float64)]


CALLS = [
    Call("conv2d", tg.nn.conv2d, F.conv2d,
         lambda op, x, w, b: op(x, w, b, stride=2, padding=1),
         normal((1, 2, 4, 4), (2, 2, 3, 3), (2,))),
    Call("softmax", tg.nn.softmax, F.softmax, lambda op, x: op(x, dim=-1), normal((3, 4))),
    Call("layer_norm", tg.nn.layer_norm, F.layer_norm,
         lambda op, x, w, b: op(x, (4,), w, b, eps=1e-5), normal((3, 4), (4,), (4,))),
    Call("linear_compute", linear, F.linear, lambda op, x, w, b: op(x, w, b),
         normal((3, 4), (2, 4), (2,))),
    Call("embedding", tg.nn.embedding, F.embedding, lambda op, i, w: op(i, w),
         embedding_inputs),
    Call("two_outputs", product_and_shift, lambda x, y: (x * y, torch.exp(x) - y),
         lambda op, x, y: op(x, y), normal((2, 3), (2, 3))),
    Call("chunk", tg.nn.chunk, torch.chunk, lambda op, x: op(x, 2, dim=1), normal((2, 4))),
    Call("max_pool_indices", tg.nn.max_pool2d, F.max_pool2d,
         lambda op, x: op(x, 2, return_indices=True), normal((1, 2, 4, 4))),
    Call("cat_list", tg.nn.cat, torch.cat, lambda op, a, b: op([a, b], dim=0),
         normal((2, 3), (1, 3))),
    Call("scaled_0d", lambda x, s: x * s, lambda x, s: x * s, lambda op, x, s: op(x, s),
         normal((2, 3), ())),
    Call("unconnected", double_first, lambda x, y: 2.0 * x + 0.0 * y,
         lambda op, x, y: op(x, y), normal((3,), (3,))),
]


def prepared(c: Call, dtype=torch.float64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    tensors = [t.to(dtype) if t.is_floating_point() else t for t in c.inputs(gen)]
    leaves = [t.requires_grad_(True) if t.is_floating_point() else t for t in tensors]
    wrapped = to_torch(c.op)
    return (lambda *ts: c.call(wrapped, *ts)), (lambda *ts: c.call(c.ref, *ts)), leaves


def as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@pytest.mark.parametrize("c", CALLS, ids=lambda c: c.name)
def test_gradcheck_and_gradgradcheck(c: Call):
    f, _, leaves = prepared(c)
    assert torch.autograd.gradcheck(f, leaves, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(f, leaves, check_fwd_over_rev=True)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("c", CALLS, ids=lambda c: c.name)
def test_matches_torch(c: Call, dtype, tol):
    f, ref, leaves = prepared(c, dtype)
    got, want = as_tuple(f(*leaves)), as_tuple(ref(*leaves))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    floats = [k for k, w in enumerate(want) if w.is_floating_point()]
    wrt = [t for t in leaves if t.requires_grad]
    heads = [torch.randn_like(want[k]) for k in floats]
    g_got = torch.autograd.grad([got[k] for k in floats], wrt, heads, allow_unused=True)
    g_want = torch.autograd.grad([want[k] for k in floats], wrt, heads, allow_unused=True)
    for g, w, x in zip(g_got, g_want, wrt, strict=True):
        w = torch.zeros_like(x) if w is None else w
        assert g is not None and g.dtype == x.dtype
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("c", CALLS, ids=lambda c: c.name)
def test_torch_func_transforms(c: Call):
    """torch.func.jacrev (vmap over the backward), jacfwd (the forward-mode rule) and
    hessian (forward over reverse) of the first float output and input."""
    f, ref, leaves = prepared(c)
    k = next(k for k, t in enumerate(leaves) if t.is_floating_point())

    def first(g):
        def h(x):
            args = [x if j == k else t.detach() for j, t in enumerate(leaves)]
            return as_tuple(g(*args))[0]
        return h

    x = leaves[k].detach()
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        torch.testing.assert_close(transform(first(f))(x), transform(first(ref))(x),
                                   rtol=1e-10, atol=1e-12)
    energy = lambda g: lambda x: first(g)(x).sin().sum()  # noqa: E731
    torch.testing.assert_close(torch.func.hessian(energy(f))(x),
                               torch.func.hessian(energy(ref))(x), rtol=1e-10, atol=1e-12)


def test_integer_inputs_and_outputs_get_no_gradient():
    idx = torch.tensor([2, 0, 2])
    w = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    y = to_torch(tg.nn.embedding)(idx, w)
    y.sum().backward()
    assert idx.grad is None
    torch.testing.assert_close(w.grad, torch.tensor([[1.0, 1.0], [0, 0], [2, 2]],
                                                    dtype=torch.float64))
    _, indices = to_torch(tg.nn.max_pool2d)(torch.randn(1, 1, 4, 4, requires_grad=True), 2,
                                             return_indices=True)
    assert indices.dtype == torch.int64 and not indices.requires_grad


def composite_layer_norm(x, shape, weight=None, eps=1e-5):
    """Layer norm from torch primitives: the reference for third order, where the fused
    ``F.layer_norm`` is silently wrong (pytorch/pytorch#175754: its double backward
    treats the saved mean and 1/std as constants when differentiated again)."""
    m = x.mean(-1, keepdim=True)
    v = (x - m).square().mean(-1, keepdim=True)
    return (x - m) * torch.rsqrt(v + eps) * weight


def test_third_order_and_keyword_tensors():
    """Keyword tensors are inputs too; backward of backward of backward."""
    ln = to_torch(tg.nn.layer_norm)
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def second(layer_norm, x, w):
        y = layer_norm(x, (3,), weight=w).tanh().sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), x, create_graph=True)
        return gg

    def third(layer_norm):
        return torch.autograd.grad(second(layer_norm, x, w).sin().sum(), (x, w))

    for got, want in zip(third(ln), third(composite_layer_norm), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(lambda x, w: second(ln, x, w), (x, w))


def test_non_contiguous_inputs_and_no_aliasing():
    x = torch.randn(4, 3, dtype=torch.float64).t()  # a transposed view
    assert np.shares_memory(as_array(x), x.numpy())  # zero-copy view
    torch.testing.assert_close(to_torch(tg.nn.softmax)(x, dim=0), F.softmax(x, dim=0))
    identity = to_torch(lambda t: t)
    y = identity(x)
    y.add_(1.0)  # an output never shares memory with an input
    assert not torch.equal(x, y)


def test_trace_cache_is_keyed_by_shape_dtype_and_static_arguments():
    cache_clear()
    soft = to_torch(tg.nn.softmax)
    x = torch.randn(2, 3, dtype=torch.float64)
    for _ in range(3):
        soft(x, dim=1)
    soft(x, dim=0)
    soft(x.float(), dim=1)
    soft(torch.randn(4, 3, dtype=torch.float64), dim=1)
    info = cache_info()
    assert (info.misses, info.hits, info.size) == (4, 2, 4)
    assert info.builds == 4


def test_errors_name_the_problem():
    conv = to_torch(tg.nn.conv2d)
    with pytest.raises(ValueError, match="CPU tensors on the cpu target and CUDA tensors"):
        conv(torch.empty(1, 2, 5, 5, device="meta"), torch.empty(3, 2, 3, 3, device="meta"))
    with pytest.raises(TypeError, match="float16"):
        conv(torch.randn(1, 2, 5, 5).half(), torch.randn(3, 2, 3, 3).half())
    with pytest.raises(ValueError, match="input channels"):
        conv(torch.randn(1, 2, 5, 5), torch.randn(3, 4, 3, 3))


def test_import_tegrad_does_not_import_the_frameworks():
    code = ("import sys, tegrad, tegrad.interop.torch_bridge, tegrad.interop.jax_bridge; "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ training a model

TG_CONV, TG_LINEAR = to_torch(tg.nn.conv2d), to_torch(linear)


class Net(torch.nn.Module):
    """conv (stride 2) -> tanh -> linear; ``backend="tegrad"`` runs both layers through
    tegrad, ``"torch"`` through torch.nn.functional."""

    def __init__(self, backend: str, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.conv_w = torch.nn.Parameter(0.3 * torch.randn(4, 1, 3, 3, generator=gen,
                                                           dtype=torch.float64))
        self.conv_b = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        self.fc_w = torch.nn.Parameter(0.2 * torch.randn(2, 36, generator=gen,
                                                         dtype=torch.float64))
        self.fc_b = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
        self.conv = TG_CONV if backend == "tegrad" else F.conv2d
        self.linear = TG_LINEAR if backend == "tegrad" else F.linear

    def forward(self, x):
        h = torch.tanh(self.conv(x, self.conv_w, self.conv_b, stride=2, padding=1))
        return self.linear(h.flatten(1), self.fc_w, self.fc_b)


def batches(n: int, size: int = 8, seed: int = 1):
    """``n`` steps cycling over two fixed batches; targets: two smooth image features."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, size, 1, 6, 6, generator=gen, dtype=torch.float64)
    target = torch.stack([x.mean(dim=(2, 3, 4)), x[:, :, 0, :3, :3].mean(dim=(2, 3))], dim=-1)
    return [(x[k % 2], target[k % 2]) for k in range(n)]


def train(backend: str, optimizer: str, steps: int = 8):
    model = Net(backend)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "SGD"
           else torch.optim.Adam(model.parameters(), lr=0.05))
    losses = []
    for x, target in batches(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_training_matches_the_torch_model(optimizer):
    got, model = train("tegrad", optimizer)
    want, reference = train("torch", optimizer)
    assert sum(got[-2:]) < 0.5 * sum(got[:2])
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


def test_as_module_in_sequential():
    seq = torch.nn.Sequential(torch.nn.Linear(3, 4).double(), as_module(tg.nn.softmax, dim=-1))
    x = torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close(seq(x), F.softmax(seq[0](x), dim=-1))
    assert "softmax, dim=-1" in repr(seq)


# ----------------------------------------------------------- DistributedDataParallel


def _ddp_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = torch.nn.parallel.DistributedDataParallel(Net("tegrad"))
        x, target = batches(1)[0]
        part = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        F.mse_loss(model(x[part]), target[part]).backward()
        torch.save([p.grad for p in model.parameters()], f"{out_dir}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_distributed_data_parallel_matches_one_process(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    torch.multiprocessing.spawn(_ddp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2)
    model = Net("tegrad")
    x, target = batches(1)[0]
    F.mse_loss(model(x), target).backward()
    for rank in range(2):
        grads = torch.load(tmp_path / f"rank{rank}.pt")
        for g, p in zip(grads, model.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-14)


def _lstm_output(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    return tg.nn.lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh)[0]


def test_a_backward_without_create_graph_reads_what_the_forward_kept(monkeypatch):
    """``loss.backward()`` runs the VJP on the values the forward kept
    (``GraphFunction.split_vjp``): no VJP graph is derived, and an LSTM's backward runs
    the adjoint scan alone. With ``create_graph`` the graph's VJP runs instead (it must be
    differentiable); without grad mode the forward keeps nothing. All agree with
    ``torch.nn.LSTM``."""
    from tegrad.backends.vjp import SplitVJP
    from tegrad.function import GraphFunction

    calls = {"split_vjp": [], "vjp": 0, "backward": 0}
    split_vjp, vjp, backward = GraphFunction.split_vjp, GraphFunction.vjp, SplitVJP.backward

    def spy_split(self, wrt, target=None):
        found = split_vjp(self, wrt, target)
        calls["split_vjp"].append(found)
        return found

    def spy_vjp(self, wrt=None):
        calls["vjp"] += 1
        return vjp(self, wrt)

    def spy_backward(self, values, heads):
        calls["backward"] += 1
        return backward(self, values, heads)

    monkeypatch.setattr(GraphFunction, "split_vjp", spy_split)
    monkeypatch.setattr(GraphFunction, "vjp", spy_vjp)
    monkeypatch.setattr(SplitVJP, "backward", spy_backward)
    cache_clear()
    steps, batch, inputs, hidden = 5, 3, 4, 6
    module = torch.nn.LSTM(inputs, hidden).double()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps, batch, inputs, dtype=torch.float64, generator=gen)
    h0, c0 = (torch.randn(batch, hidden, dtype=torch.float64, generator=gen) for _ in "hc")
    head = torch.randn(steps, batch, hidden, dtype=torch.float64, generator=gen)
    weights = [module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0]
    leaves = [t.detach().clone().requires_grad_() for t in (x, h0, c0, *weights)]
    ref_leaves = [t.clone().requires_grad_() for t in (x, h0, c0)]
    ref, _ = module(ref_leaves[0], (ref_leaves[1][None], ref_leaves[2][None]))
    want = torch.autograd.grad(ref, [*ref_leaves, *weights], head)
    op = to_torch(_lstm_output)

    out = op(*leaves)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    out.backward(head)
    assert calls["vjp"] == 0 and calls["backward"] == 1
    (split,) = calls["split_vjp"]
    assert [k.kind for k in split.backward_program.plan.kernels].count("scan") == 1
    for leaf, w in zip(leaves, want, strict=True):
        torch.testing.assert_close(leaf.grad, w, rtol=1e-9, atol=1e-11)

    got = torch.autograd.grad(op(*leaves), leaves, head, create_graph=True)
    assert calls["vjp"] == 1 and calls["backward"] == 1  # the graph's VJP, differentiable
    assert all(g.requires_grad for g in got)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)

    with torch.no_grad():
        op(*leaves)
    assert len(calls["split_vjp"]) == 2  # (one per forward with grad mode on)


def test_an_input_changed_in_place_before_the_backward_is_refused():
    """The kept values are views of the inputs: torch's saved-tensor check still runs."""
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 3, dtype=torch.float64)
    b = torch.zeros(4, dtype=torch.float64)
    y = to_torch(linear)(x, w, b)
    with torch.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
