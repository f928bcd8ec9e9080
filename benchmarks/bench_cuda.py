"""The GPU benchmark: tegrad's ``target="cuda"`` against PyTorch on the same device, float32,
in one process (the protocol of ``gpu_path.md`` section 7).

    PYTHONUNBUFFERED=1 PYTHONPATH=src python3 benchmarks/bench_cuda.py --budget 420
    python3 benchmarks/bench_cuda.py --cases matmul,softmax --runs 100 --json /tmp/x.json
    TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/bench_cuda.py --smoke

Cases (``--list``): matmul 1024^3, 4096^3; conv2d 3x3 s1/s2 C64 56^2 K64 at N=8, 64;
max_pool2d 3x3 s2 p1 64x56^2 at N=8, 64; softmax, layer_norm 4096 and 32768 x 1024; an
involution and a per-pixel dynamic filter written with ``tg.compute`` (N=8, 64); the LSTM
L50 N32 I128 H256; ResNet-50's conv layers (``bench_layers_cases``). ``--smoke``: tiny
shapes, 2 runs, no torch.compile; without a GPU, Triton's interpreter on CPU tensors.

Rows: forward; backward (tegrad ``tg.build_vjp``'s backward on what its forward kept;
torch ``autograd.grad`` of a retained graph); forward+backward. Columns: tegrad, torch
eager TF32 off, torch eager TF32 on, ``torch.compile`` (TF32 off); ``cudnn.benchmark`` on.
Each side's first call per row is timed apart and checked against torch float64 on the
device (max abs difference / max abs value: 1e-4, TF32 1e-2); tegrad's backward is run
twice and compared bitwise. Then the sides take turns in blocks; each call is timed by
CUDA events (L2 not flushed); medians of ``--runs`` calls. Failures are recorded, not
fatal. Results: ``$OUT/bench_cuda.json`` (else ``reports/``), rewritten after each case,
and the printed tables beside it (``.txt``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # bench_shared, bench_cpu_cases, bench_layers_cases
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

SIDES = ("tegrad", "eager", "eager_tf32", "compile")
TOLERANCE = 1e-4  # max abs difference over max abs float64 value (bench_layers_cases')
TF32_TOLERANCE = 1e-2  # TF32 products keep 10 mantissa bits
SLOW = 1.5  # the summary counts rows whose tegrad time is over this times the peer's
WORST = 5
WARMUP = 2  # untimed calls per side and row before the blocks (after the checked call)


# -- the device ------------------------------------------------------------------------


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class Device:
    """Where the tensors live, the clock, and the TF32 switches."""

    def __init__(self):
        import torch

        self.torch = torch
        self.gpu = torch.cuda.is_available() and not interpreting()
        self.where = torch.device("cuda" if self.gpu else "cpu")

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def tf32(self, on: bool) -> None:
        self.torch.backends.cuda.matmul.allow_tf32 = on
        self.torch.backends.cudnn.allow_tf32 = on

    def call_ms(self, fn) -> float:
        """One synchronized call's wall time."""
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return 1e3 * (time.perf_counter() - t0)

    def block_ms(self, fn, count: int) -> tuple[list[float], float]:
        """``count`` calls in a row: each one's time (CUDA events on the GPU, else the
        host clock) and the block's wall time per call."""
        torch = self.torch
        if self.gpu:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(count)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for start, end in events:
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            wall = 1e3 * (time.perf_counter() - t0) / count
            return [s.elapsed_time(e) for s, e in events], wall
        times = []
        t0 = time.perf_counter()
        for _ in range(count):
            t = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t))
        return times, 1e3 * (time.perf_counter() - t0) / count

    def free(self) -> None:
        gc.collect()
        if self.gpu:
            self.torch.cuda.empty_cache()

    def info(self) -> dict:
        torch = self.torch
        info = {"gpu": self.gpu, "interpreted": interpreting(), "torch": torch.__version__,
                "python": platform.python_version(), "numpy": np.__version__,
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version() if self.gpu else None,
                "name": torch.cuda.get_device_name() if self.gpu else "cpu (interpreter)"}
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError as error:
            info["triton"] = f"not importable: {error}"
        return info


# -- cases -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuCase:
    """One case: ``graph()`` is tegrad's (``bench_cpu_cases.Graph``: placeholders, output,
    head, gradients, wrt), ``arrays(rng)`` the inputs as NumPy arrays (moved to the
    device), ``torch_setup(tensors) -> (fn, leaves)`` torch's function of the
    differentiated leaves (in ``wrt`` order) on tensors of any dtype and device."""

    name: str
    title: str
    group: str
    graph: Callable
    arrays: Callable
    torch_setup: Callable
    wrt: tuple
    input_names: tuple


def functional_setup(torch_fn, wrt):
    """``torch_setup`` for a function of all its input tensors: the ``wrt`` ones become
    leaves (sharing the inputs' memory), the others stay fixed."""
    def setup(tensors):
        leaves = [tensors[k].detach().requires_grad_() for k in wrt]

        def fn(*given):
            merged = list(tensors)
            for k, leaf in zip(wrt, given, strict=True):
                merged[k] = leaf
            return torch_fn(*merged)
        return fn, leaves
    return setup


def from_layer(layer, group: str) -> GpuCase:
    """A ``bench_layers_cases.Layer`` (tegrad forward, torch function, input arrays)."""
    return GpuCase(layer.name, layer.title, group, layer.graph,
                   lambda rng: [a.draw(rng) for a in layer.inputs],
                   functional_setup(layer.torch_fn, layer.differentiated()),
                   layer.differentiated(), tuple(a.name for a in layer.inputs))


def lstm_setup(tensors):
    """``torch.nn.LSTM`` (cuDNN on the GPU) in the tensors' dtype and device, the weights
    loaded; leaves x, h0, c0 and the four parameters (``bench_lstm.NAMES`` order)."""
    import torch

    x, h0, c0, w_ih, w_hh, b_ih, b_hh = tensors
    module = torch.nn.LSTM(x.shape[2], h0.shape[1], num_layers=1).to(x.device, x.dtype)
    with torch.no_grad():
        for name, value in (("weight_ih_l0", w_ih), ("weight_hh_l0", w_hh),
                            ("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh)):
            getattr(module, name).copy_(value)
    leaves = [t.detach().clone().requires_grad_() for t in (x, h0, c0)]
    params = [module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0]

    def fn(x, h0, c0, *_params):
        return module(x, (h0[None], c0[None]))[0]
    return fn, leaves + params


def _F():
    import torch.nn.functional as F

    return F


def involution_tegrad(x, w_reduce, w_span, groups: int, k: int = 3):
    """Involution (Li et al. 2021), in index notation: a per-pixel ``k x k`` kernel per
    channel group, generated from the pixel's channels (1x1 reduce, tanh, 1x1 span;
    tanh, not the paper's BN + ReLU, so float32 and float64 gradients meet no kink), then
    applied to the pixel's zero-padded neighbourhood."""
    import tegrad as tg

    n, c, h, w = x.shape
    cr, per, pad = w_reduce.shape[0], c // groups, k // 2
    rc, rr = tg.reduce_axis(c, "rc"), tg.reduce_axis(cr, "rr")
    hidden = tg.compute((n, cr, h, w), lambda b, o, i, j: tg.tanh(
        tg.sum(w_reduce[o, rc] * x[b, rc, i, j], rc)), name="inv_hidden")
    kernel = tg.compute((n, groups * k * k, h, w), lambda b, o, i, j: tg.sum(
        w_span[o, rr] * hidden[b, rr, i, j], rr), name="inv_kernel")
    ri, rj = tg.reduce_axis(k, "ri"), tg.reduce_axis(k, "rj")

    def body(b, ch, i, j):
        y, z = i + ri - pad, j + rj - pad
        inside = tg.all(0 <= y, y < h, 0 <= z, z < w)
        return tg.sum(tg.if_then_else(inside, x[b, ch, y, z], 0.0)
                      * kernel[b, (ch // per) * (k * k) + ri * k + rj, i, j], [ri, rj])
    return tg.compute((n, c, h, w), body, name="involution")


def involution_torch(x, w_reduce, w_span, groups: int, k: int = 3):
    n, c, h, w = x.shape
    F = _F()
    hidden = F.conv2d(x, w_reduce[:, :, None, None]).tanh()
    kernel = F.conv2d(hidden, w_span[:, :, None, None]).view(n, groups, 1, k * k, h, w)
    patches = F.unfold(x, k, padding=k // 2).view(n, groups, c // groups, k * k, h, w)
    return (kernel * patches).sum(3).view(n, c, h, w)


def dynamic_filter_tegrad(x, f):
    """``out[n, c, h, w] = sum_{i,j} x[n, c, h+i-1, w+j-1] f[n, 3i+j, h, w]``, zero
    padding: each output pixel has its own 3x3 filter, an input."""
    import tegrad as tg

    n, c, h, w = x.shape
    ri, rj = tg.reduce_axis(3, "ri"), tg.reduce_axis(3, "rj")

    def body(b, ch, i, j):
        y, z = i + ri - 1, j + rj - 1
        inside = tg.all(0 <= y, y < h, 0 <= z, z < w)
        return tg.sum(tg.if_then_else(inside, x[b, ch, y, z], 0.0) * f[b, ri * 3 + rj, i, j],
                      [ri, rj])
    return tg.compute((n, c, h, w), body, name="dynamic_filter")


def dynamic_filter_torch(x, f):
    n, c, h, w = x.shape
    return (_F().unfold(x, 3, padding=1).view(n, c, 9, h, w) * f[:, None]).sum(2)


def _scaled_conv(layer):
    """A ResNet conv layer on smoke shapes: N=1, channels / 16, at most 8x8 (its stride
    and padding, kept in its functions, work on any shape)."""
    x, w = layer.inputs[:2]

    def ch(c):
        return max(1, c // 16)

    n, c, size = 1, ch(x.shape[1]), min(x.shape[2], 8)
    inputs = (replace(x, shape=(n, c, size, size)),
              replace(w, shape=(ch(w.shape[0]), c, *w.shape[2:]))) + layer.inputs[2:]
    return replace(layer, inputs=inputs,
                   title=f"{layer.title} [smoke: x {inputs[0].shape}, w {inputs[1].shape}]")


def cases(smoke: bool) -> list[GpuCase]:
    """Every case, the section-7 anchors first (x1 then x8 sizes), then the custom
    layers, the LSTM and ResNet-50's convs; ``smoke``: the same on tiny shapes."""
    import bench_cpu_cases as cc
    import bench_layers_cases as lc
    import tegrad as tg
    from bench_layers_cases import Array, Layer

    def pick(full, tiny):
        return tiny if smoke else full

    found = []

    def add(layer, group):
        found.append(from_layer(layer, group))

    def matmul(name, n):
        add(Layer(name, f"matmul {n}x{n} @ {n}x{n}",
                  (Array("A", (n, n)), Array("B", (n, n), scale=n ** -0.5)),
                  tg.nn.matmul, lambda a, b: a @ b), "anchor")

    def conv(stride, n, label):
        c, size = pick((64, 56), (4, 8))
        add(lc.conv(f"conv2d_s{stride}_{label}", n, c, size, c, 3, stride, 1), "anchor")

    def pool(n, label):
        c, size = pick((64, 56), (4, 8))
        add(lc.max_pool(f"max_pool2d_{label}", n, c, size), "anchor")

    def rows(kind, rows_full, rows_tiny):
        r, d = pick((rows_full, 1024), (rows_tiny, 32))
        name = f"{kind}_{rows_full}"
        if kind == "softmax":
            add(Layer(name, f"softmax {r}x{d} over the last dim", (Array("x", (r, d)),),
                      lambda x: tg.nn.softmax(x, dim=-1), lambda x: x.softmax(dim=-1)),
                "anchor")
        else:
            add(Layer(name, f"layer_norm {r}x{d} over the last dim, weight and bias",
                      (Array("x", (r, d)), Array("weight", (d,)), Array("bias", (d,))),
                      lambda x, w, b: tg.nn.layer_norm(x, (d,), w, b),
                      lambda x, w, b: _F().layer_norm(x, (d,), w, b)), "anchor")

    for x8 in (False, True):  # the anchors' x1 sizes, then their x8 ones
        side = 4096 if x8 else 1024
        matmul(f"matmul{side}", pick(side, 32 if x8 else 16))
        n, label = pick(64 if x8 else 8, 3 if x8 else 2), f"n{64 if x8 else 8}"
        for stride in (1, 2):
            conv(stride, n, label)
        pool(n, label)
        rows("softmax", 32768 if x8 else 4096, 32 if x8 else 16)
        rows("layer_norm", 32768 if x8 else 4096, 32 if x8 else 16)

    for big in (False, True):
        n, label = pick(64 if big else 8, 3 if big else 2), f"n{64 if big else 8}"
        c, size, groups, reduce = pick((64, 56, 4, 4), (8, 6, 2, 2))
        cr = c // reduce
        add(Layer(f"involution_{label}", f"involution 3x3, {groups} groups, reduce {reduce} "
                  f"(1x1 {c}->{cr}, tanh, 1x1 {cr}->{groups * 9}), {n}x{c}x{size}^2",
                  (Array("x", (n, c, size, size)), Array("w_reduce", (cr, c), scale=c ** -0.5),
                   Array("w_span", (groups * 9, cr), scale=cr ** -0.5)),
                  lambda x, a, b, g=groups: involution_tegrad(x, a, b, g),
                  lambda x, a, b, g=groups: involution_torch(x, a, b, g)), "custom")
        c, size = pick((64, 56), (4, 6))
        add(Layer(f"dynamic_filter_{label}", f"per-pixel dynamic 3x3 filter, {n}x{c}x{size}^2, "
                  f"filters {n}x9x{size}^2",
                  (Array("x", (n, c, size, size)), Array("f", (n, 9, size, size), scale=1 / 3)),
                  dynamic_filter_tegrad, dynamic_filter_torch), "custom")

    lstm = cc.lstm_case(*pick((50, 32, 128, 256), (3, 2, 4, 8)))
    found.append(GpuCase("lstm", lstm.title, "lstm", lstm.graph, lstm.arrays, lstm_setup,
                         tuple(range(len(lstm.shapes))), tuple(lstm.shapes)))

    for layer in lc.resnet50_layers():
        if layer.title.startswith("conv "):
            add(_scaled_conv(layer) if smoke else layer, "resnet50")
    names = [c.name for c in found]
    assert len(set(names)) == len(names), "case names must be unique"
    return found


# -- one case --------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised by the alarm in a case over ``--case-timeout`` (a BaseException: the
    per-side ``except Exception`` must not catch it)."""


def _on_alarm(signum, frame):
    raise CaseTimeout("the case ran over --case-timeout")


def _error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) < 2000 else text[:2000] + " ..."


def _as_tensor(t, where):
    import torch

    if isinstance(t, torch.Tensor):
        return t
    return torch.from_numpy(np.asarray(t)).to(where)


def _same_bits(a: list, b: list, where) -> bool:
    import torch

    return len(a) == len(b) and all(torch.equal(_as_tensor(x, where), _as_tensor(y, where))
                                    for x, y in zip(a, b, strict=True))


class CaseRun:
    """Builds, checks and times one case; ``record`` is its JSON."""

    def __init__(self, case: GpuCase, args, device: Device):
        self.case, self.args, self.dev = case, args, device
        self.record = {"case": case.name, "title": case.title, "group": case.group,
                       "errors": {}, "first_call_ms": {s: {} for s in SIDES},
                       "checks": [], "rows": [], "bitwise_backward": None,
                       "bitwise_forward_backward": None}
        self.programs: dict[str, dict] = {s: {} for s in SIDES}  # side -> row -> fn

    def fail(self, side: str, row: str, e: BaseException) -> None:
        self.record["errors"][f"{side} {row}"] = _error(e)
        print(f"    !!! {self.case.name} {side} {row}: {_error(e).splitlines()[0][:300]}",
              flush=True)
        if self.args.traceback:
            traceback.print_exc()

    def run(self) -> dict:
        from bench_cpu_cases import ROWS

        t0 = time.perf_counter()
        self.reference()
        self.tegrad()
        self.torch_sides()
        if not self.args.check_only:
            for row in ROWS:
                self.time_row(row)
        self.record["seconds"] = time.perf_counter() - t0
        return self.record

    # inputs and the float64 reference

    def reference(self) -> None:
        import torch

        case, where = self.case, self.dev.where
        rng = np.random.default_rng(0)
        arrays = case.arrays(rng)
        self.x = [torch.from_numpy(a).to(where) for a in arrays]
        self.record["inputs"] = {n: list(a.shape) for n, a in zip(case.input_names, arrays,
                                                                   strict=True)}
        x64 = [t.double() if t.is_floating_point() else t for t in self.x]
        fn, leaves = case.torch_setup(x64)
        out = fn(*leaves)
        head = rng.standard_normal(tuple(out.shape), dtype=np.float32)
        self.head = torch.from_numpy(head).to(where)
        grads = torch.autograd.grad(out, leaves, self.head.double())
        out, grads = out.detach(), [g.detach() for g in grads]
        self.names = ["out"] + [f"d{case.input_names[k]}" for k in case.wrt]
        self.want = {"forward": [out], "backward": grads, "forward+backward": [out, *grads]}
        del fn, leaves

    def check(self, side: str, row: str, got) -> bool:
        """Records per tensor; True if all pass."""
        import torch

        want = self.want[row]
        names = self.names[1:] if row == "backward" else (
            self.names[:1] if row == "forward" else self.names)
        tolerance = TF32_TOLERANCE if side == "eager_tf32" else TOLERANCE
        got = list(got)
        ok = len(got) == len(want)
        kind = (f"torch on {got[0].device}" if isinstance(got[0], torch.Tensor)
                else type(got[0]).__name__) if got else "nothing"
        if not ok:
            self.record["checks"].append({"side": side, "row": row, "tensor": "*", "ok": False,
                                          "rel_err": None, "tolerance": tolerance,
                                          "note": f"{len(got)} results, {len(want)} expected"})
        for name, g, w in zip(names, got, want, strict=False):
            g = _as_tensor(g, w.device).detach()
            if tuple(g.shape) != tuple(w.shape):
                ok = False
                self.record["checks"].append({"side": side, "row": row, "tensor": name,
                                              "ok": False, "rel_err": None,
                                              "tolerance": tolerance, "returned": kind,
                                              "note": f"shape {tuple(g.shape)}, expected "
                                                      f"{tuple(w.shape)}"})
                continue
            scale = max(float(w.abs().max()), 1e-30) if w.numel() else 1.0
            err = float((g.to(torch.float64) - w).abs().max()) / scale if w.numel() else 0.0
            passed = bool(err <= tolerance)  # NaN fails
            ok &= passed
            self.record["checks"].append({"side": side, "row": row, "tensor": name,
                                          "rel_err": err, "tolerance": tolerance,
                                          "ok": passed, "returned": kind})
            if not passed:
                print(f"    !!! {self.case.name} {side} {row} {name}: rel err {err:.3e} over "
                      f"{tolerance:g}", flush=True)
        return ok

    def first_call(self, side: str, row: str, fn):
        """The first call, timed apart, and checked; returns its results."""
        results = []

        def call():
            results.append(fn())
        self.dev.tf32(side == "eager_tf32")
        self.record["first_call_ms"][side][row] = self.dev.call_ms(call)
        self.check(side, row, results[0])
        self.programs[side][row] = fn
        return results[0]

    # tegrad

    def tegrad(self) -> None:
        import tegrad as tg

        case, x, head, first = self.case, self.x, self.head, self.record["first_call_ms"]
        t0 = time.perf_counter()
        try:
            graph = case.graph()
        except Exception as e:  # noqa: BLE001 - recorded; torch's sides still run
            self.fail("tegrad", "graph", e)
            return
        first["tegrad"]["graph_s"] = time.perf_counter() - t0  # tg.nn + tg.gradient
        ins, out = graph.inputs, graph.out
        for row in ("forward", "forward+backward", "backward"):
            try:
                t0 = time.perf_counter()
                if row == "forward":
                    program = tg.build(ins, [out], target="cuda")
                    fn = lambda p=program: p(*x)  # noqa: E731
                elif row == "forward+backward":
                    program = tg.build([*ins, graph.head], [out, *graph.grads], target="cuda")
                    fn = lambda p=program: p(*x, head)  # noqa: E731
                else:
                    keep, pullback = tg.build_vjp(ins, out, wrt=graph.wrt, target="cuda")
                    first["tegrad"]["build_vjp_s"] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    saved = [None]

                    def forward_once(keep=keep, saved=saved):
                        saved[0] = keep(*x)[1]
                    first["tegrad"]["vjp_forward"] = self.dev.call_ms(forward_once)
                    fn = lambda p=pullback, s=saved[0]: p(s, head)  # noqa: E731
                if row != "backward":
                    first["tegrad"][f"build_{row}_s"] = time.perf_counter() - t0
                got = self.first_call("tegrad", row, fn)
                if row in ("backward", "forward+backward"):
                    again = fn()
                    same = _same_bits(list(got), list(again), self.dev.where)
                    self.record[f"bitwise_{row.replace('+', '_')}"] = same
                    if not same:
                        print(f"    !!! {case.name} tegrad {row}: two runs differ bitwise",
                              flush=True)
                    types = sorted({type(t).__module__.split(".")[0] for t in got})
                    self.record.setdefault("tegrad_result_types", {})[row] = types
            except Exception as e:  # noqa: BLE001
                self.fail("tegrad", row, e)
                self.dev.free()

    # torch

    def torch_sides(self) -> None:
        import torch

        try:
            fn, leaves = self.case.torch_setup(self.x)
        except Exception as e:  # noqa: BLE001
            self.fail("torch", "setup", e)
            return
        head = self.head
        compiled = None
        if self.args.compile:
            import torch._dynamo

            torch._dynamo.reset()  # one code object for every case: no recompile limit
            compiled = torch.compile(fn, dynamic=False)
        for side, f in (("eager", fn), ("eager_tf32", fn), ("compile", compiled)):
            if f is None:
                continue
            self.dev.tf32(side == "eager_tf32")
            retained = []

            def forward(f=f):
                with torch.no_grad():
                    return [f(*leaves)]

            def backward(retained=retained):
                return list(torch.autograd.grad(retained[0], leaves, head, retain_graph=True))

            def forward_backward(f=f):
                out = f(*leaves)
                return [out, *torch.autograd.grad(out, leaves, head)]

            for row, g in (("forward", forward), ("backward", backward),
                           ("forward+backward", forward_backward)):
                try:
                    if row == "backward":
                        self.record["first_call_ms"][side]["retained_forward"] = \
                            self.dev.call_ms(lambda f=f, r=retained: r.append(f(*leaves)))
                    self.first_call(side, row, g)
                except Exception as e:  # noqa: BLE001
                    self.fail(side, row, e)
                    self.dev.free()

    # timing

    def time_row(self, row: str) -> None:
        """The sides in turns, ``--blocks`` blocks, the order rotating."""
        args, dev = self.args, self.dev
        live = [s for s in SIDES if row in self.programs[s]]
        record = {"case": self.case.name, "row": row, "times": {}}
        if not live:
            self.record["rows"].append(record)
            return
        fns = {s: self.programs[s][row] for s in live}
        runs = {}
        for s in list(live):
            dev.tf32(s == "eager_tf32")
            try:
                one = min(dev.call_ms(fns[s]) for _ in range(WARMUP))
            except Exception as e:  # noqa: BLE001
                self.fail(s, f"{row} (timing)", e)
                live.remove(s)
                continue
            fit = int(args.row_seconds * 1e3 / max(one, 1e-3))
            runs[s] = max(min(args.runs, 10), min(args.runs, fit))
        blocks = max(1, min(args.blocks, min(runs.values(), default=1)))
        times = {s: [] for s in live}
        walls = {s: [] for s in live}
        gc.collect()
        for b in range(blocks):
            if not live:
                break
            order = live[b % len(live):] + live[:b % len(live)]
            for s in order:
                dev.tf32(s == "eager_tf32")
                per_block = -(-runs[s] // blocks)
                try:
                    fns[s]()
                    got, wall = dev.block_ms(fns[s], per_block)
                except Exception as e:  # noqa: BLE001
                    self.fail(s, f"{row} (timing)", e)
                    live.remove(s)
                    continue
                times[s] += got
                walls[s].append(wall)
        dev.tf32(False)
        for s in times:
            if times[s]:
                record["times"][s] = {"ms": statistics.median(times[s]), "runs": len(times[s]),
                                      "min_ms": min(times[s]),
                                      "wall_ms": statistics.median(walls[s])}
        ms = {s: v["ms"] for s, v in record["times"].items()}
        for peer in SIDES[1:]:
            record[f"tegrad_over_{peer}"] = (ms["tegrad"] / ms[peer]
                                             if "tegrad" in ms and ms.get(peer) else None)
        record["checks_ok"] = {s: all(c["ok"] for c in self.record["checks"]
                                      if c["side"] == s and c["row"] == row) for s in live}
        self.record["rows"].append(record)


# -- the run ---------------------------------------------------------------------------


def summarize(rows: list[dict]) -> dict:
    """Per peer: the median tegrad/peer ratio over rows, the rows over ``SLOW`` and the
    ``WORST`` ones; also per row kind."""
    from bench_cpu_cases import ROWS

    def over(found, peer):
        key = f"tegrad_over_{peer}"
        have = [r for r in found if r.get(key) is not None]
        ratios = [r[key] for r in have]
        worst = sorted(have, key=lambda r: -r[key])[:WORST]
        return {"rows": len(have), "median": statistics.median(ratios) if ratios else None,
                f"over_{SLOW}": sum(v > SLOW for v in ratios),
                "worst": [{"case": r["case"], "row": r["row"], "ratio": r[key]} for r in worst]}

    return {peer: {"all rows": over(rows, peer),
                   **{row: over([r for r in rows if r["row"] == row], peer) for row in ROWS}}
            for peer in SIDES[1:]}


def _ms(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _first_calls(result: dict, short: dict) -> None:
    """Per case: tegrad's graph and builds (s), each side's first calls (ms)."""
    import bench_shared

    cells = []
    for case in result["cases"]:
        f = case["first_call_ms"]
        t = f["tegrad"]
        build = sum(v for k, v in t.items() if k.endswith("_s"))
        cells.append((case["case"], f"{build:.2f}" if build else "-",
                      *(_ms(t.get(row)) for row in ("forward", "vjp_forward", "backward",
                                                     "forward+backward")),
                      _ms(f["eager"].get("forward+backward")),
                      *(_ms(f["compile"].get(row)) for row in ("forward", "retained_forward",
                                                               "forward+backward"))))
    bench_shared.print_table(
        "first calls (ms; JIT compilation, cuDNN and Inductor autotuning): tegrad's graph and "
        "builds (s), then each program's first call",
        ("case", "tg build s", "tg fwd", "tg vjp fwd", "tg bwd", "tg fwd+bwd", "eager fwd+bwd",
         "compile fwd", "compile fwd (grad)", "compile fwd+bwd"), cells)


def report(result: dict) -> None:
    import bench_shared

    short = {"forward": "fwd", "backward": "bwd", "forward+backward": "fwd+bwd"}
    cells = []
    for case in result["cases"]:
        for r in case["rows"]:
            t = r["times"]
            failed = sorted({f"{c['side']}" for c in case["checks"]
                             if c["row"] == r["row"] and not c["ok"]})
            errors = sorted({k.split(" ")[0] for k in case["errors"]
                             if k.split(" ", 1)[1].split(" (")[0] in (r["row"], "graph",
                                                                       "setup")})
            note = ", ".join([f"check failed: {s}" for s in failed]
                             + [f"error: {s}" for s in errors]) or "ok"
            cells.append((case["case"], short[r["row"]],
                          *(_ms(t.get(s, {}).get("ms")) for s in SIDES),
                          bench_shared.ratio_text(r.get("tegrad_over_eager")),
                          bench_shared.ratio_text(r.get("tegrad_over_compile")), note))
        if not case["rows"] and case.get("error"):
            cells.append((case["case"], "-", *("-" for _ in SIDES), "-", "-",
                          "case failed: " + case["error"].splitlines()[0][:80]))
    d = result["device"]
    print()
    print(f"device: {d['name']}; torch {d['torch']}, triton {d['triton']}; float32; CUDA-event "
          f"medians of up to {result['runs']} calls per side, {result['blocks']} blocks, "
          f"L2 not flushed" if d["gpu"] else
          f"device: {d['name']}; torch {d['torch']}, triton {d['triton']}; host-clock medians "
          f"of {result['runs']} calls (a smoke run: the times mean nothing)")
    if result["cases"]:
        _first_calls(result, short)
    if cells:
        bench_shared.print_table(
            "ms per call (median); tegrad / torch eager (TF32 off) and / torch.compile",
            ("case", "row", "tegrad", "eager", "eager tf32", "compile", "tg/eager",
             "tg/compile", "checks"), cells)
    for peer in ("eager", "compile"):
        s = result["summary"].get(peer, {}).get("all rows")
        if not s or not s["rows"]:
            continue
        worst = ", ".join(f"{w['case']} {short[w['row']]} {w['ratio']:.2f}" for w in s["worst"])
        print(f"tegrad / {peer}: median {s['median']:.2f} over {s['rows']} rows; "
              f"{s[f'over_{SLOW}']} over {SLOW}x; worst {WORST}: {worst}")
    for key, what in (("bitwise_backward", "backward"),
                      ("bitwise_forward_backward", "forward+backward")):
        bits = {c["case"]: c[key] for c in result["cases"]}
        differ = [k for k, v in bits.items() if v is False]
        unknown = [k for k, v in bits.items() if v is None]
        same = sum(v is True for v in bits.values())
        print(f"tegrad {what} bitwise identical across two runs: {same} of {len(bits)} cases"
              + (f"; DIFFER: {', '.join(differ)}" if differ else "")
              + (f"; not run: {', '.join(unknown)}" if unknown else ""))
    host = [c["case"] for c in result["cases"]
            if "numpy" in c.get("tegrad_result_types", {}).get("backward", [])]
    if host:
        print(f"note: tegrad's build_vjp returned NumPy arrays for torch inputs in {len(host)} "
              f"of {len(result['cases'])} cases (its backward row includes the copies)")
    checks = [c for case in result["cases"] for c in case["checks"]]
    bad = [(case["case"], c) for case in result["cases"] for c in case["checks"] if not c["ok"]]
    print(f"checks against torch float64: {len(checks) - len(bad)} of {len(checks)} passed")
    for name, c in bad:
        err = "-" if c["rel_err"] is None else f"{c['rel_err']:.3e}"
        print(f"!!! CHECK FAILED: {name} {c['side']} {c['row']} {c['tensor']}: rel err {err} "
              f"(tolerance {c['tolerance']:g}){' ' + c['note'] if c.get('note') else ''}")
    for case in result["cases"]:
        for where, text in case["errors"].items():
            print(f"!!! ERROR: {case['case']} {where}: {text.splitlines()[0][:400]}")
        if case.get("error"):
            print(f"!!! CASE FAILED: {case['case']}: {case['error'].splitlines()[0][:400]}")
    if result["skipped"]:
        print(f"not started (--budget {result['budget_s']:g} s spent): "
              + ", ".join(result["skipped"]))


def default_json() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "bench_cuda.json" if out else ROOT / "reports" / "bench_cuda.json"


def write_json(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=1, default=str) + "\n")
    os.replace(temporary, path)


def _git_commit() -> str | None:
    head = ROOT / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (ROOT / ".git" / ref[5:]).read_text().strip()
        return ref
    except OSError:
        return None


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated substrings of case names")
    parser.add_argument("--runs", type=int, help="timed calls per side and row (50; --smoke 2)")
    parser.add_argument("--blocks", type=int, default=5, help="blocks per side and row (5)")
    parser.add_argument("--row-seconds", type=float, default=10.0,
                        help="fewer runs (at least 10) where a side's would take longer (10)")
    parser.add_argument("--json", type=Path, help="where to write the results (default "
                        "$OUT/bench_cuda.json, else reports/bench_cuda.json)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, 2 runs, no torch.compile (the self-test)")
    parser.add_argument("--budget", type=float, help="seconds after which no case starts")
    parser.add_argument("--case-timeout", type=float, default=240.0,
                        help="seconds one case may take before it is abandoned (240; 0: none)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="the torch.compile column (default: on, off with --smoke)")
    parser.add_argument("--check-only", action="store_true", help="first calls and checks only")
    parser.add_argument("--traceback", action="store_true", help="print errors' tracebacks")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.smoke else 50)
    args.compile = (not args.smoke) if args.compile is None else args.compile
    args.json = args.json or default_json()
    return args


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    import torch

    if args.smoke and not interpreting() and not torch.cuda.is_available() \
            and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported
        print("no GPU: TRITON_INTERPRET=1 (Triton's interpreter, CPU tensors)", flush=True)
    device = Device()
    if not device.gpu and not interpreting():
        print("no GPU, and TRITON_INTERPRET is not set: nothing to run on", file=sys.stderr)
        return 2
    import bench_layers_cases

    selected = bench_layers_cases.select(cases(args.smoke), args.cases)
    if args.list:
        for c in selected:
            print(f"{c.name}: {c.title}")
        return 0
    torch.backends.cudnn.benchmark = True
    device.tf32(False)
    result = {"suite": "bench_cuda", "smoke": args.smoke, "runs": args.runs,
              "blocks": args.blocks, "row_seconds": args.row_seconds,
              "compile": args.compile, "budget_s": args.budget, "device": device.info(),
              "commit": _git_commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "protocol": {"timing": "CUDA events per call" if device.gpu else "host clock",
                           "l2_flushed": False, "cudnn_benchmark": True,
                           "tolerance": TOLERANCE, "tf32_tolerance": TF32_TOLERANCE,
                           "tegrad_precision": "IEEE fp32 (the cuda target has no TF32)"},
              "cases": [], "rows": [], "skipped": [], "summary": {}}
    print(f"bench_cuda: {len(selected)} cases on {result['device']['name']} "
          f"(torch {result['device']['torch']}, triton {result['device']['triton']}); "
          f"json {args.json}", flush=True)
    start = time.perf_counter()
    if args.case_timeout:
        signal.signal(signal.SIGALRM, _on_alarm)
    for k, case in enumerate(selected):
        elapsed = time.perf_counter() - start
        if args.budget is not None and elapsed > args.budget:
            result["skipped"] = [c.name for c in selected[k:]]
            print(f"--budget {args.budget:g} s spent ({elapsed:.0f} s): "
                  f"{len(selected) - k} cases not started", flush=True)
            break
        print(f"[{k + 1}/{len(selected)}] {case.name}: {case.title} ({elapsed:.0f} s)",
              flush=True)
        run = CaseRun(case, args, device)
        try:
            if args.case_timeout:
                signal.setitimer(signal.ITIMER_REAL, args.case_timeout)
            run.run()
        except (Exception, CaseTimeout) as e:  # noqa: BLE001 - one case must not stop the run
            run.record["error"] = _error(e)
            print(f"    !!! {case.name} failed: {_error(e).splitlines()[0][:300]}", flush=True)
            if args.traceback:
                traceback.print_exc()
        finally:
            if args.case_timeout:
                signal.setitimer(signal.ITIMER_REAL, 0)
        record = run.record
        del run
        if args.compile:
            import torch._dynamo

            torch._dynamo.reset()  # compiled graphs and their guards hold the case's tensors
        device.tf32(False)
        device.free()
        result["cases"].append(record)
        result["rows"] += record["rows"]
        for r in record["rows"]:
            ratios = "  ".join(f"/{p} {r[f'tegrad_over_{p}']:.2f}" for p in SIDES[1:]
                               if r.get(f"tegrad_over_{p}") is not None)
            print(f"    {r['row']}: " + "  ".join(f"{s} {_ms(v['ms'])} ms"
                                               for s, v in r["times"].items())
                  + (f"  (tegrad {ratios})" if ratios else ""), flush=True)
        result["seconds"] = time.perf_counter() - start
        result["summary"] = summarize(result["rows"])
        write_json(args.json, result)
    result["seconds"] = time.perf_counter() - start
    result["summary"] = summarize(result["rows"])
    write_json(args.json, result)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        report(result)
    print(text.getvalue(), end="", flush=True)
    table = args.json.with_suffix(".txt")
    table.write_text(text.getvalue())
    print(f"wrote {args.json} and {table.name} ({result['seconds']:.0f} s)", flush=True)
    failed = sum(not c["ok"] for case in result["cases"] for c in case["checks"]) + sum(
        len(case["errors"]) + bool(case.get("error")) for case in result["cases"])
    if failed:
        print(f"!!! {failed} failed check(s) or error(s): exit status 1", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
