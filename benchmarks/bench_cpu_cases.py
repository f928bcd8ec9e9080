"""The cases of ``bench_cpu.py``: each op written three times (tegrad with ``tg.nn`` on
placeholders, PyTorch eager, JAX), the same float32 inputs for all three, the three
programs (rows) of each side, and the operation's flops counted from its shapes.

Flops (one multiply-add = 2; ``exp``, ``rsqrt``, ``tanh``, ``sigmoid``, a compare = 1;
work that a program repeats, such as the forward that a gradient program recomputes, is
not counted: the count is the math of the row, so recomputation shows as lower GFLOP/s):

- matmul n: forward ``2 n^3``; backward (dA, dB) ``4 n^3``.
- conv2d: forward ``2 N K Ho Wo C R S``; backward (dX, dW) twice that (every (output,
  tap) pair meets each gradient once; stride 2's dX has the forward's count, not a
  zero-dilated one's).
- max_pool2d 2x2: forward one compare per input element, ``N C H W``; backward one
  select per input element, ``N C H W``.
- softmax over rows of D: forward ``5 D`` per row (max, subtract, exp, sum, divide);
  backward ``4 D`` (``dx = y * (dy - sum(dy * y))``: multiply-add, subtract, multiply).
- layer_norm over rows of D with weight and bias: forward ``7 D`` per row (mean, subtract,
  square-and-sum, normalize, weight, bias); backward ``11 D`` (``dxhat = dy w``, ``dw +=
  dy xhat``, ``db += dy``, the two row means of ``dxhat`` and ``dxhat xhat``, and ``dx =
  rstd (dxhat - mean - xhat mean2)``).
- LSTM (L steps, batch N, input I, hidden H): the four gates' matrix products, forward
  ``2 L N 4H (I + H)``; backward twice that (the products for dx/dh and for the weights).
  The elementwise gate math (about ``15 L N H``, under 2% at the default sizes) is left out.

Forward+backward rows count forward + backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import tegrad as tg

ROWS = ("forward", "backward", "forward+backward")


@dataclass
class Graph:
    """The tegrad side of a case: placeholders (in the order every side takes its
    arguments), the output, the head (a placeholder of the output's shape) and the
    gradients of ``wrt`` (None: every input; ``bench_layers`` differentiates only the
    float inputs torch does, not a loss's targets or class weights)."""

    inputs: list
    out: object
    head: object
    grads: list
    wrt: list | None = None


@dataclass(frozen=True)
class Case:
    """One op of the suite. ``forward(*placeholders)`` builds the tegrad output;
    ``torch_setup(arrays)`` returns ``(fn, leaves)`` with ``fn(*leaves)`` torch's output
    and ``leaves`` the tensors to differentiate (requiring grad, in input order);
    ``jax_forward(*arrays)`` is JAX's output; ``arrays(rng)`` the inputs."""

    name: str
    title: str
    shapes: dict
    forward: Callable
    torch_setup: Callable
    jax_forward: Callable
    flops_forward: float
    flops_backward: float
    arrays: Callable | None = None

    def flops(self, row: str) -> float:
        return {"forward": self.flops_forward, "backward": self.flops_backward,
                "forward+backward": self.flops_forward + self.flops_backward}[row]

    def graph(self) -> Graph:
        """``tg.nn`` forward and ``tg.gradient`` of every input, given a head."""
        inputs = [tg.placeholder(s, "float32", name=n) for n, s in self.shapes.items()]
        out = self.forward(*inputs)
        head = tg.placeholder(out.shape, "float32", name="head")
        grads = list(tg.gradient(out, inputs, head=head))
        return Graph(inputs, out, head, grads)

    def make_arrays(self, graph: Graph, seed: int = 0):
        """Inputs (standard normal unless the case says otherwise) and a head."""
        rng = np.random.default_rng(seed)
        if self.arrays is not None:
            arrays = self.arrays(rng)
        else:
            arrays = [rng.standard_normal(s, dtype=np.float32) for s in self.shapes.values()]
        return arrays, rng.standard_normal(graph.head.shape, dtype=np.float32)


def _torch_leaves(arrays):
    import torch

    return [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]


def _torch_functional(fn):
    """``torch_setup`` for an op that is a function of its input tensors."""
    return lambda arrays: (fn, _torch_leaves(arrays))


# the three sides ---------------------------------------------------------------------------


def tegrad_programs(graph: Graph, target: str, arrays, backward: str = "saved",
                    options=None) -> dict:
    """Row -> ``fn(arrays, head)`` returning the row's arrays (the output, the gradients
    of all inputs, or both). Forward: ``tg.build`` of the output; forward+backward: one
    ``tg.build`` of both. Backward, ``saved``: ``tg.build_vjp``'s backward on what its
    forward kept, that forward run once here on ``arrays`` (as torch's graph is built
    once); ``recompute``: ``tg.build`` of the gradients alone, which recomputes the forward
    values it needs at every call."""
    ins, out, head, grads = graph.inputs, graph.out, graph.head, graph.grads
    given = {} if options is None else {"options": options}  # (older trees: no options)
    fwd = tg.build(ins, [out], target=target, **given)
    both = tg.build([*ins, head], [out, *grads], target=target, **given)
    if backward == "saved":
        keep, pullback = tg.build_vjp(ins, out, wrt=graph.wrt, target=target, **given)
        saved = keep(*arrays)[1]

        def bwd(a, h):
            return pullback(saved, h)
    elif backward == "recompute":
        program = tg.build([*ins, head], grads, target=target, **given)

        def bwd(a, h):
            return program(*a, h)
    else:
        raise ValueError(f"backward: saved or recompute, not {backward!r}")
    return {"forward": lambda a, h: fwd(*a), "backward": bwd,
            "forward+backward": lambda a, h: both(*a, h)}


def torch_programs(case: Case, arrays, head) -> dict:
    """Row -> ``fn()`` returning torch tensors: the forward under ``no_grad``;
    ``autograd.grad`` of a graph built once and retained; a forward and its
    ``autograd.grad``."""
    import torch

    fn, leaves = case.torch_setup(arrays)
    th = torch.from_numpy(head)
    retained = fn(*leaves)

    def forward():
        with torch.no_grad():
            return [fn(*leaves)]

    def backward():
        return list(torch.autograd.grad(retained, leaves, th, retain_graph=True))

    def forward_backward():
        out = fn(*leaves)
        return [out, *torch.autograd.grad(out, leaves, th)]

    return dict(zip(ROWS, (forward, backward, forward_backward), strict=True))


def jax_programs(case: Case, arrays, head) -> dict:
    """Row -> ``fn()`` returning JAX arrays (waited for): ``jax.jit`` of the forward; a
    jitted application of ``jax.vjp``'s pullback (its residuals, from one forward here)
    to the head; ``jax.vjp`` and its pullback in one jitted function."""
    import jax

    f = case.jax_forward
    args = [jax.device_put(a) for a in arrays]
    h = jax.device_put(head)
    fwd = jax.jit(f)
    _, pullback = jax.vjp(f, *args)
    bwd = jax.jit(lambda pull, h: pull(h))

    @jax.jit
    def both(h, *a):
        out, pull = jax.vjp(f, *a)
        return (out, *pull(h))

    return {"forward": lambda: [jax.block_until_ready(fwd(*args))],
            "backward": lambda: list(jax.block_until_ready(bwd(pullback, h))),
            "forward+backward": lambda: list(jax.block_until_ready(both(h, *args)))}


# the ops ---------------------------------------------------------------------------------


def matmul_case(n: int) -> Case:
    def torch_fn(a, b):
        return a @ b

    def jax_fn(a, b):
        return a @ b

    return Case(f"matmul{n}", f"matmul {n}x{n} @ {n}x{n}", {"A": (n, n), "B": (n, n)},
                tg.nn.matmul, _torch_functional(torch_fn), jax_fn, 2.0 * n**3, 4.0 * n**3)


def conv2d_case(stride: int, batch: int, channels: int, size: int, kernels: int) -> Case:
    def forward(x, w):
        return tg.nn.conv2d(x, w, stride=stride, padding=1)

    def torch_fn(x, w):
        import torch.nn.functional as F

        return F.conv2d(x, w, stride=stride, padding=1)

    def jax_fn(x, w):
        from jax import lax

        return lax.conv_general_dilated(x, w, (stride, stride), [(1, 1), (1, 1)],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    out = (size + 2 - 3) // stride + 1
    flops = 2.0 * batch * kernels * out * out * channels * 9
    return Case(f"conv2d_s{stride}",
                f"conv2d N={batch} C={channels} {size}x{size} K={kernels} 3x3 pad 1 "
                f"stride {stride}",
                {"X": (batch, channels, size, size), "W": (kernels, channels, 3, 3)},
                forward, _torch_functional(torch_fn), jax_fn, flops, 2 * flops)


def max_pool2d_case(batch: int, channels: int, size: int) -> Case:
    def forward(x):
        return tg.nn.max_pool2d(x, 2)

    def torch_fn(x):
        import torch.nn.functional as F

        return F.max_pool2d(x, 2)

    def jax_fn(x):
        from jax import lax

        return lax.reduce_window(x, -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    elements = float(batch * channels * size * size)
    return Case("max_pool2d", f"max_pool2d 2x2 on {batch}x{channels}x{size}x{size}",
                {"X": (batch, channels, size, size)}, forward, _torch_functional(torch_fn),
                jax_fn, elements, elements)


def softmax_case(rows: int, dim: int) -> Case:
    def forward(x):
        return tg.nn.softmax(x, dim=-1)

    def torch_fn(x):
        return x.softmax(dim=-1)

    def jax_fn(x):
        import jax

        return jax.nn.softmax(x, axis=-1)

    return Case("softmax", f"softmax {rows}x{dim} over the last dim", {"X": (rows, dim)},
                forward, _torch_functional(torch_fn), jax_fn, 5.0 * rows * dim,
                4.0 * rows * dim)


def layer_norm_case(rows: int, dim: int) -> Case:
    def forward(x, w, b):
        return tg.nn.layer_norm(x, (dim,), w, b)

    def torch_fn(x, w, b):
        import torch.nn.functional as F

        return F.layer_norm(x, (dim,), w, b, eps=1e-5)

    def jax_fn(x, w, b):
        import jax.numpy as jnp

        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) * (1.0 / jnp.sqrt(var + 1e-5)) * w + b

    return Case("layer_norm", f"layer_norm {rows}x{dim} over the last dim, weight and bias",
                {"X": (rows, dim), "weight": (dim,), "bias": (dim,)}, forward,
                _torch_functional(torch_fn), jax_fn, 7.0 * rows * dim, 11.0 * rows * dim)


def lstm_case(seq: int, batch: int, inp: int, hidden: int) -> Case:
    """``torch.nn.LSTM`` with tegrad's weights loaded (bench_lstm's loading); JAX: the
    same gates (i, f, g, o) in a ``lax.scan``."""
    import bench_lstm

    shapes = {"x": (seq, batch, inp), "h0": (batch, hidden), "c0": (batch, hidden),
              "weight_ih": (4 * hidden, inp), "weight_hh": (4 * hidden, hidden),
              "bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    assert tuple(shapes) == bench_lstm.NAMES

    def forward(*ps):
        return tg.nn.lstm(*ps, name="lstm")[0]

    def arrays(rng):
        bound = 1.0 / np.sqrt(hidden)  # torch.nn.LSTM's initialisation
        return [rng.uniform(-bound, bound, s).astype(np.float32) if n.startswith(("w", "b"))
                else rng.standard_normal(s, dtype=np.float32) for n, s in shapes.items()]

    def torch_setup(values):
        ref = bench_lstm.TorchLSTM(values, np.zeros((seq, batch, hidden), np.float32))
        return (lambda x, h0, c0, *_params: ref.module(x, (h0, c0))[0]), ref.leaves

    def jax_fn(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        import jax
        import jax.numpy as jnp

        def step(carry, projected):
            h, c = carry
            i, f, g, o = jnp.split(projected + h @ w_hh.T + b_hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        return jax.lax.scan(step, (h0, c0), x @ w_ih.T + b_ih)[1]

    flops = 2.0 * seq * batch * 4 * hidden * (inp + hidden)
    return Case("lstm", f"LSTM L={seq} N={batch} I={inp} H={hidden}", shapes, forward,
                torch_setup, jax_fn, flops, 2 * flops, arrays)


def cases(quick: bool) -> list[Case]:
    """The suite (issue 6, item 4); ``quick``: the same ops on small shapes."""
    matmuls = (64, 128) if quick else (512, 1024)
    conv = (2, 8, 16, 8) if quick else (8, 64, 56, 64)  # N, C, H = W, K
    rows, dim = (64, 128) if quick else (4096, 1024)
    lstm = (5, 4, 8, 16) if quick else (50, 32, 128, 256)  # L, N, I, H
    return [*(matmul_case(n) for n in matmuls),
            *(conv2d_case(s, *conv) for s in (1, 2)),
            max_pool2d_case(*conv[:3]),
            softmax_case(rows, dim),
            layer_norm_case(rows, dim),
            lstm_case(*lstm)]


def select(all_cases: list[Case], spec: str | None) -> list[Case]:
    """``spec``: comma-separated names or name prefixes (``conv2d`` takes both strides)."""
    if not spec:
        return all_cases
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    unknown = [w for w in wanted if not any(c.name.startswith(w) for c in all_cases)]
    if unknown:
        raise SystemExit(f"--cases: no case named {', '.join(unknown)}; choose from "
                         f"{', '.join(c.name for c in all_cases)} (or a prefix, e.g. conv2d)")
    return [c for c in all_cases if any(c.name.startswith(w) for w in wanted)]
