"""LSTM: tegrad (``tg.nn.lstm`` and its generated backward) against ``torch.nn.LSTM`` on
the CPU, float32, one process; with and without gradient checkpointing on both sides.

    .venv/bin/python benchmarks/bench_lstm.py              # L=50, N=32, I=128, H=256
    .venv/bin/python benchmarks/bench_lstm.py --seq 1000   # a long sequence
    .venv/bin/python benchmarks/bench_lstm.py --checkpoint 10 --wrt init
    .venv/bin/python benchmarks/bench_lstm.py --quick      # 2 timed runs, a smoke run
    .venv/bin/python benchmarks/bench_lstm.py --markdown   # GitHub tables

One layer, one direction, ``batch_first=False``, torch's weight layout (the weights that
tegrad uses are loaded into the torch module). Rows: forward (``output`` only; torch under
``torch.no_grad``), forward+backward (``output`` and the gradients given a random head on
``output``; torch: ``output.backward(head)``) and forward+backward with checkpointing.
``--wrt all`` (default) asks the gradients of x, h0, c0 and the four parameters, ``--wrt
init`` those of h0 and c0 only. Each time is the median of ``--repeat`` runs after one
warm-up; the callables take turns, one run each, with a short pause at each switch (BLAS
and OpenMP worker threads spin after a call; ``--pause``, default 0.2 s): every timed call
is a first call after idling. ``--blocks`` times calls in a loop instead, with
``bench_cpu.py``'s protocol: per side blocks of at most three runs, each after a pause
and an untimed call. ``tg.gradient`` and ``tg.build`` are timed once. ``--target`` picks
tegrad's backend (default: ``tg.build``'s).

Checkpointing, ``--checkpoint K`` (default ``ceil(sqrt(L))``; 0 leaves it out): tegrad
builds ``tg.nn.lstm(..., checkpoint=K)``, whose plan stores as checkpoints every state
history that only the backward's adjoint scan reads (the plan's notes, printed, say which
and why the others are kept whole); torch runs the sequence in chunks of K steps, each
under ``torch.utils.checkpoint`` (non-reentrant), so its backward recomputes a chunk's
forward from the chunk's (h, c) before differentiating it.

Peak memory: each side's forward+backward runs once in a fresh subprocess (this script
with a hidden flag), which reports the rise of its peak resident set size
(``ru_maxrss``) from before it makes the input arrays to after the call; tegrad's child
then runs it again under ``tracemalloc``, whose peak is the most bytes of NumPy arrays
alive at once (the kernels' temporaries included, the inputs not), plus what the compiled
target's buffer pool holds from the first call (the second reuses those buffers).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_shared, a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])
# threadpoolctl, where importable, sets the count again after the import

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tegrad as tg  # noqa: E402

NAMES = ("x", "h0", "c0", "weight_ih", "weight_hh", "bias_ih", "bias_hh")



WRT = {"all": NAMES, "init": ("h0", "c0")}


def tegrad_graph(seq, batch, inp, hidden, checkpoint=None, wrt="all"):
    """Placeholders (in NAMES order), the head, output and the gradients of the inputs
    named by ``WRT[wrt]``."""
    shapes = {"x": (seq, batch, inp), "h0": (batch, hidden), "c0": (batch, hidden),
              "weight_ih": (4 * hidden, inp), "weight_hh": (4 * hidden, hidden),
              "bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    ps = [tg.placeholder(shapes[n], "float32", name=n) for n in NAMES]
    output, _h_n, _c_n = tg.nn.lstm(*ps, name="lstm", checkpoint=checkpoint or None)
    head = tg.placeholder(output.shape, "float32", name="head")
    t0 = time.perf_counter()
    grads = tg.gradient(output, [p for p in ps if p.name in WRT[wrt]], head=head)
    t_grad = time.perf_counter() - t0
    return ps, head, output, list(grads), t_grad


def make_arrays(ps, head, seed=0):
    rng = np.random.default_rng(seed)
    hidden = ps[NAMES.index("weight_hh")].shape[1]
    bound = 1.0 / np.sqrt(hidden)  # torch.nn.LSTM's initialisation
    arrays = []
    for p in ps:
        if p.name.startswith(("weight", "bias")):
            arrays.append(rng.uniform(-bound, bound, p.shape).astype(np.float32))
        else:
            arrays.append(rng.standard_normal(p.shape, dtype=np.float32))
    return arrays, rng.standard_normal(head.shape, dtype=np.float32)


class TorchLSTM:
    """``torch.nn.LSTM`` with tegrad's arrays loaded: ``forward()`` (no grad) and
    ``forward_backward()`` (returns output and the gradients, in NAMES order)."""

    def __init__(self, arrays, head):
        import torch

        self.torch = torch
        x, h0, c0, w_ih, w_hh, b_ih, b_hh = (torch.from_numpy(a) for a in arrays)
        self.module = torch.nn.LSTM(x.shape[2], h0.shape[1], num_layers=1)
        with torch.no_grad():
            for name, value in (("weight_ih_l0", w_ih), ("weight_hh_l0", w_hh),
                                ("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh)):
                getattr(self.module, name).copy_(value)
        self.x = x.clone().requires_grad_()
        self.h0 = h0[None].clone().requires_grad_()  # torch: (num_layers, N, H)
        self.c0 = c0[None].clone().requires_grad_()
        self.head = torch.from_numpy(head)
        self.params = [self.module.weight_ih_l0, self.module.weight_hh_l0,
                       self.module.bias_ih_l0, self.module.bias_hh_l0]
        self.leaves = [self.x, self.h0, self.c0, *self.params]

    def forward(self):
        with self.torch.no_grad():
            return self.module(self.x, (self.h0, self.c0))[0]

    def forward_backward(self, checkpoint=None):
        """Output and the gradients (NAMES order); ``checkpoint=K``: the sequence in chunks
        of K steps, each under ``torch.utils.checkpoint`` (recomputed in the backward)."""
        for t in self.leaves:
            t.grad = None
        if checkpoint:
            output = self._chunked(checkpoint)
        else:
            output = self.module(self.x, (self.h0, self.c0))[0]
        output.backward(self.head)
        return output, [t.grad for t in self.leaves]

    def _chunked(self, every: int):
        from torch.utils.checkpoint import checkpoint

        def chunk(x, h, c):
            out, (h, c) = self.module(x, (h, c))
            return out, h, c

        outs, h, c = [], self.h0, self.c0
        for start in range(0, self.x.shape[0], every):
            out, h, c = checkpoint(chunk, self.x[start:start + every], h, c,
                                   use_reentrant=False)
            outs.append(out)
        return self.torch.cat(outs)


# memory (run in a fresh subprocess) --------------------------------------------------------


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def _vm_hwm_bytes() -> int | None:
    """Linux's own peak RSS of this address space (``VmHWM``), for a cross-check."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_child(side, args) -> dict:
    """One forward+backward of ``side``; peak RSS rise from before the inputs exist."""
    ps, head, output, grads, _ = tegrad_graph(args.seq, args.batch, args.input, args.hidden,
                                              args.checkpoint, args.wrt)
    extra = {}
    if side == "tegrad":
        fb = tg.build([*ps, head], [output, *grads], target=args.target)
        before = _maxrss_bytes()
        arrays, h = make_arrays(ps, head)
        fb(*arrays, h)
        after = _maxrss_bytes()
        # NumPy reports its arrays to tracemalloc: the peak of what is alive at once; the
        # compiled target reuses buffers it keeps from the first call (counted apart)
        tracemalloc.start()
        fb(*arrays, h)
        extra["traced_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        pool = getattr(fb.program, "pool", None)
        extra["traced_peak"] += 0 if pool is None else pool.held_bytes()
    else:
        import torch

        torch.nn.LSTM(args.input, args.hidden)  # torch's first-use allocations, first
        before = _maxrss_bytes()
        arrays, h = make_arrays(ps, head)
        ref = TorchLSTM(arrays, h)
        saved = {}

        def pack(t):
            saved[(t.data_ptr(), t.untyped_storage().nbytes())] = t.untyped_storage().nbytes()
            return t

        if args.checkpoint:  # the hooks would also see what the recomputes save
            ref.forward_backward(args.checkpoint)
        else:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                ref.forward_backward()
            extra["saved_bytes"] = sum(saved.values())
        after = _maxrss_bytes()
    return {"side": side, "before": before, "after": after, "vm_hwm": _vm_hwm_bytes(),
            **extra}


def run_memory_child(side, args, checkpoint) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_memory-child", side,
           "--seq", str(args.seq), "--batch", str(args.batch), "--input", str(args.input),
           "--hidden", str(args.hidden), "--checkpoint", str(checkpoint), "--wrt", args.wrt]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.target:
        cmd += ["--target", args.target]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory subprocess for {side} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def materialized_bytes(f) -> int:
    """Bytes of every array the program makes (each kernel's outputs; a scan makes one
    history per state, or for a checkpointed one its init, restart rows and cached
    segments). The program keeps them all until the call returns."""
    from tegrad.lower.checkpoint import stored_rows

    total = 0
    for k in f.program.plan.kernels:
        if k.kind == "scan":
            for n, t in enumerate(k.detail.op.outputs):
                row = int(np.prod(t.shape[1:], dtype=np.int64)) * np.dtype(t.dtype).itemsize
                total += stored_rows(k.detail, n) * row
            for t in dict.fromkeys(k.detail.kept_steps):  # step values kept for a backward
                rows = k.detail.op.length - k.detail.op.init_rows
                total += rows * int(np.prod(t.shape, dtype=np.int64)) * np.dtype(
                    t.dtype).itemsize
        else:
            total += int(np.prod(k.tensor.shape, dtype=np.int64)) * np.dtype(
                k.tensor.dtype).itemsize
    return total


# timing and output ---------------------------------------------------------------------


def median_ms(fns, repeat: int, pause: float = 0.2) -> list[float]:
    """Median milliseconds of each callable: one warm-up each, then ``repeat`` rounds in
    which each takes one turn, with ``pause`` seconds before each turn."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times, strict=True):
            time.sleep(pause)
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(ts) for ts in times]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=50, help="sequence length L (50)")
    parser.add_argument("--batch", type=int, default=32, help="batch N (32)")
    parser.add_argument("--input", type=int, default=128, help="input size I (128)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size H (256)")
    parser.add_argument("--checkpoint", type=int,
                        help="checkpoint every K steps (default ceil(sqrt(L)); 0: leave out)")
    parser.add_argument("--wrt", choices=tuple(WRT), default="all",
                        help="gradients of every input (all) or of h0 and c0 only (init)")
    parser.add_argument("--target", help="tegrad's target (default: tg.build's)")
    parser.add_argument("--repeat", type=int, help="timed runs (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="2 timed runs (a smoke run)")
    parser.add_argument("--pause", type=float, default=0.2,
                        help="seconds of pause before each timed call (default 0.2)")
    parser.add_argument("--blocks", action="store_true",
                        help="bench_cpu.py's protocol: per side blocks of at most three "
                             "runs, each "
                             "after a pause and an untimed call (calls in a loop, as in "
                             "training), instead of one timed call per turn")
    parser.add_argument("--threads", type=int,
                        help="threads for torch and NumPy's BLAS (default: torch's default)")
    parser.add_argument("--markdown", action="store_true", help="print GitHub tables")
    parser.add_argument("--_memory-child", choices=("tegrad", "torch"), dest="memory_child",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        bench_shared.set_threads(args.threads)
        print(json.dumps(memory_child(args.memory_child, args)))
        return 0
    k = math.ceil(math.sqrt(args.seq)) if args.checkpoint is None else args.checkpoint
    variants = [0, k] if k else [0]  # checkpoint 0: none
    # memory first, while this process is small: Linux copies the parent's peak RSS into
    # a child at fork and keeps it across exec, so a child spawned from a large parent
    # would start with the parent's ru_maxrss and show no rise
    mem = {(side, v): run_memory_child(side, args, v) for v in variants
           for side in ("tegrad", "torch")}
    args.threads_used, blas_line = bench_shared.set_threads(args.threads)
    import torch

    repeat = args.repeat or (2 if args.quick else 5)
    wanted = WRT[args.wrt]
    ps, head, output, grads, t_grad = tegrad_graph(args.seq, args.batch, args.input,
                                                   args.hidden, wrt=args.wrt)
    t0 = time.perf_counter()
    fwd = tg.build(ps, [output], target=args.target)
    t_build_fwd = time.perf_counter() - t0
    t0 = time.perf_counter()
    fb = tg.build([*ps, head], [output, *grads], target=args.target)
    t_build_fb = time.perf_counter() - t0
    fbs = {0: fb}
    if k:
        cps, chead, cout, cgrads, _ = tegrad_graph(args.seq, args.batch, args.input,
                                                   args.hidden, k, args.wrt)
        fbs[k] = tg.build([*cps, chead], [cout, *cgrads], target=args.target)
    arrays, h = make_arrays(ps, head)
    ref = TorchLSTM(arrays, h)

    # correctness, once per variant
    want_out, want_grads = ref.forward_backward()
    want = {"output": want_out.detach().numpy()}
    want.update({f"d{n}": g.numpy().reshape(a.shape)
                 for n, g, a in zip(NAMES, want_grads, arrays, strict=True)})
    names = ["output", *(f"d{n}" for n in NAMES if n in wanted)]
    check_cells = []
    for v, f in fbs.items():
        for name, g in zip(names, f(*arrays, h), strict=True):
            w = want[name]
            check_cells.append((name, str(v or "none"), "x".join(map(str, w.shape)),
                                f"{float(np.abs(g - w).max()):.2e}",
                                f"{float(np.abs(w).max()):.2e}"))
    fwd_diff = float(np.abs(fwd(*arrays)[0] - want["output"]).max())
    if k:
        torch_k = ref.forward_backward(k)
        torch_k_diff = max(float((a - b).detach().abs().max()) for a, b in
                           zip([torch_k[0], *torch_k[1]], [want_out, *want_grads],
                               strict=True))

    # timing
    fns = [lambda: fwd(*arrays), ref.forward, lambda: fb(*arrays, h), ref.forward_backward]
    if k:
        fns += [lambda: fbs[k](*arrays, h), lambda: ref.forward_backward(k)]
    with bench_shared.OtherLoad() as other:
        if args.blocks:
            times = bench_shared.time_alternating(fns, repeat, 2, args.pause)
        else:
            times = median_ms(fns, repeat, args.pause)

    mb = 1 / 2**20
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    target = type(fb.program).__name__
    machine = (f"machine: {platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} CPUs, torch {torch.__version__}, numpy {np.__version__}, "
               f"threads {args.threads_used} ({blas_line}), repeats {repeat}, "
               f"load average {load}")
    print(f"LSTM L={args.seq} N={args.batch} I={args.input} H={args.hidden}, float32, "
          f"one layer, gradients of {', '.join(wanted)}; tegrad {target}, torch CPU")
    print(machine)
    if other.cores is not None:
        print(f"other processes during the timed runs: {other.cores:.2f} cores busy on average "
              f"over {other.wall:.1f} s")
        if other.cores > 0.25:
            print("warning: other processes competed for the CPUs; the times are unreliable "
                  "(with more\nthan one thread, a worker thread that loses its core stalls "
                  "the whole call)")
    print(f"tg.gradient (graph generation): {1e3 * t_grad:.1f} ms; tg.build: forward "
          f"{1e3 * t_build_fwd:.1f} ms, forward+backward {1e3 * t_build_fb:.1f} ms "
          f"({len(fb.program.plan.kernels)} kernels)")
    print()
    rows = [("forward", *times[0:2]), ("forward+backward", *times[2:4])]
    if k:
        rows.append((f"forward+backward, checkpoint={k}", *times[4:6]))
    bench_shared.print_table(
        f"time: median of {repeat} runs after one warm-up (ms; "
        + ("calls in blocks, bench_cpu's protocol)" if args.blocks else
           f"one call per turn, each after a {args.pause:g} s pause)"),
        ("pass", "tegrad ms", "torch ms", "ratio tegrad/torch"),
        [(name, f"{a:.1f}", f"{b:.1f}", f"{a / b:.2f}") for name, a, b in rows],
        args.markdown)
    bench_shared.print_table("check: tegrad forward+backward against torch (float32)",
                             ("tensor", "checkpoint", "shape", "max abs diff",
                              "max abs torch"), check_cells, args.markdown)
    print(f"tegrad forward-only output against torch: max abs diff {fwd_diff:.2e}")
    if k:
        print(f"torch checkpointed against torch plain: max abs diff {torch_k_diff:.2e}")
        print(f"tegrad's plan with checkpoint={k}: "
              + ("; ".join(fbs[k].program.plan.notes) or "no note"))
    print()
    cells = []
    for v in variants:
        label = f", checkpoint={v}" if v else ""
        t_mem, r_mem = mem[("tegrad", v)], mem[("torch", v)]
        cells.append((f"tegrad{label}", f"{(t_mem['after'] - t_mem['before']) * mb:.1f}",
                      f"{t_mem['traced_peak'] * mb:.1f}",
                      f"{materialized_bytes(fbs[v]) * mb:.1f}", "every array the program makes"))
        saved = r_mem.get("saved_bytes")
        cells.append((f"torch{label}", f"{(r_mem['after'] - r_mem['before']) * mb:.1f}", "",
                      "" if saved is None else f"{saved * mb:.1f}",
                      "" if saved is None else "tensors saved for backward"))
    bench_shared.print_table("peak memory: one forward+backward in a fresh process",
                             ("side", "peak RSS increase MB", "traced peak MB", "arrays MB",
                              "arrays counted"), cells, args.markdown)
    for (side, v), m in mem.items():
        if m["vm_hwm"] is not None and abs(m["vm_hwm"] - m["after"]) > 16 * 2**20:
            print(f"warning: {side} (checkpoint {v}): ru_maxrss {m['after'] * mb:.0f} MB but "
                  f"VmHWM {m['vm_hwm'] * mb:.0f} MB; the RSS increase is not trustworthy")
    print("Peak RSS increase: the rise of ru_maxrss from before the inputs are made to after\n"
          "one forward+backward (baselines, after the imports: tegrad "
          f"{mem[('tegrad', 0)]['before'] * mb:.0f} MB, torch "
          f"{mem[('torch', 0)]['before'] * mb:.0f} MB); it counts temporaries inside kernels\n"
          "too. Traced peak: the most bytes of NumPy arrays alive at once during a second\n"
          "call (tracemalloc; inputs made before it are not counted), plus the buffers the\n"
          "compiled target keeps from the first call for reuse. tegrad checkpoints only\n"
          "histories that no kernel but the adjoint scan reads (the plan's note above).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
