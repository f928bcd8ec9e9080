"""LSTM: tegrad (``tg.nn.lstm`` and its generated backward, NumPy backend) against
``torch.nn.LSTM`` on the CPU, float32, one process.

    .venv/bin/python benchmarks/bench_lstm.py              # L=50, N=32, I=128, H=256
    .venv/bin/python benchmarks/bench_lstm.py --quick      # 2 timed runs, a smoke run
    .venv/bin/python benchmarks/bench_lstm.py --markdown   # GitHub tables

One layer, one direction, ``batch_first=False``, torch's weight layout (the weights that
tegrad uses are loaded into the torch module). Rows: forward (``output`` only; torch under
``torch.no_grad``) and forward+backward (``output`` and the gradients of x, h0, c0 and the
four parameters given a random head on ``output``; torch: ``output.backward(head)``).
Each time is the median of ``--repeat`` runs after one warm-up; the four callables take
turns, one run each, with a short pause at each switch (BLAS and OpenMP worker threads
spin after a call). ``tg.gradient`` and ``tg.build`` are timed once.

Peak memory: each side's forward+backward runs once in a fresh subprocess (this script
with a hidden flag), which reports the rise of its peak resident set size
(``ru_maxrss``) from before it makes the input arrays to after the call. Gradient
checkpointing (keeping every k-th state and recomputing the rest in the backward) is not
implemented in tegrad: its number is for no checkpointing, the whole history is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_shared, a sibling
import bench_shared  # noqa: E402  (sets BLAS threads: before numpy loads)

bench_shared.apply(sys.argv[1:])
# threadpoolctl, where importable, sets the count again after the import

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import tegrad as tg  # noqa: E402

NAMES = ("x", "h0", "c0", "weight_ih", "weight_hh", "bias_ih", "bias_hh")



def tegrad_graph(seq, batch, inp, hidden):
    """Placeholders (in NAMES order), the head, output and the gradients of all inputs."""
    shapes = {"x": (seq, batch, inp), "h0": (batch, hidden), "c0": (batch, hidden),
              "weight_ih": (4 * hidden, inp), "weight_hh": (4 * hidden, hidden),
              "bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    ps = [tg.placeholder(shapes[n], "float32", name=n) for n in NAMES]
    output, _h_n, _c_n = tg.nn.lstm(*ps, name="lstm")
    head = tg.placeholder(output.shape, "float32", name="head")
    t0 = time.perf_counter()
    grads = tg.gradient(output, ps, head=head)
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

    def forward_backward(self):
        for t in self.leaves:
            t.grad = None
        output = self.module(self.x, (self.h0, self.c0))[0]
        output.backward(self.head)
        return output, [t.grad for t in self.leaves]


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


def memory_child(side, seq, batch, inp, hidden) -> dict:
    """One forward+backward of ``side``; peak RSS rise from before the inputs exist."""
    ps, head, output, grads, _ = tegrad_graph(seq, batch, inp, hidden)
    extra = {}
    if side == "tegrad":
        fb = tg.build([*ps, head], [output, *grads])
        before = _maxrss_bytes()
        arrays, h = make_arrays(ps, head)
        fb(*arrays, h)
    else:
        import torch

        torch.nn.LSTM(inp, hidden)  # torch's own first-use allocations, before the baseline
        before = _maxrss_bytes()
        arrays, h = make_arrays(ps, head)
        ref = TorchLSTM(arrays, h)
        saved = {}

        def pack(t):
            saved[(t.data_ptr(), t.untyped_storage().nbytes())] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            ref.forward_backward()
        extra["saved_bytes"] = sum(saved.values())
    after = _maxrss_bytes()
    return {"side": side, "before": before, "after": after, "vm_hwm": _vm_hwm_bytes(),
            **extra}


def run_memory_child(side, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_memory-child", side,
           "--seq", str(args.seq), "--batch", str(args.batch), "--input", str(args.input),
           "--hidden", str(args.hidden)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory subprocess for {side} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def materialized_bytes(f) -> int:
    """Bytes of every array the NumPy program makes (each kernel's outputs; a scan makes
    one history per state). The program keeps them all until the call returns."""
    total = 0
    for k in f.program.plan.kernels:
        outs = k.detail.op.outputs if k.kind == "scan" else [k.tensor]
        for t in outs:
            total += int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
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
    parser.add_argument("--repeat", type=int, help="timed runs (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="2 timed runs (a smoke run)")
    parser.add_argument("--threads", type=int,
                        help="threads for torch and NumPy's BLAS (default: torch's default)")
    parser.add_argument("--markdown", action="store_true", help="print GitHub tables")
    parser.add_argument("--_memory-child", choices=("tegrad", "torch"), dest="memory_child",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        bench_shared.set_threads(args.threads)
        print(json.dumps(memory_child(args.memory_child, args.seq, args.batch, args.input,
                                      args.hidden)))
        return 0
    # memory first, while this process is small: Linux copies the parent's peak RSS into
    # a child at fork and keeps it across exec, so a child spawned from a large parent
    # would start with the parent's ru_maxrss and show no rise
    mem = {side: run_memory_child(side, args) for side in ("tegrad", "torch")}
    args.threads_used, blas_line = bench_shared.set_threads(args.threads)
    import torch

    repeat = args.repeat or (2 if args.quick else 5)
    ps, head, output, grads, t_grad = tegrad_graph(args.seq, args.batch, args.input,
                                                   args.hidden)
    t0 = time.perf_counter()
    fwd = tg.build(ps, [output])
    t_build_fwd = time.perf_counter() - t0
    t0 = time.perf_counter()
    fb = tg.build([*ps, head], [output, *grads])
    t_build_fb = time.perf_counter() - t0
    arrays, h = make_arrays(ps, head)
    ref = TorchLSTM(arrays, h)

    # correctness, once
    got = fb(*arrays, h)
    want_out, want_grads = ref.forward_backward()
    fwd_out = fwd(*arrays)[0]
    want = [want_out.detach().numpy()] + [g.numpy().reshape(a.shape)
                                          for g, a in zip(want_grads, arrays, strict=True)]
    check_cells = []
    for name, g, w in zip(("output", *(f"d{n}" for n in NAMES)), got, want, strict=True):
        check_cells.append((name, "x".join(map(str, w.shape)),
                            f"{float(np.abs(g - w).max()):.2e}", f"{float(np.abs(w).max()):.2e}"))
    fwd_diff = float(np.abs(fwd_out - want[0]).max())

    # timing
    with bench_shared.OtherLoad() as other:
        t_tg_f, t_tg_fb, t_th_f, t_th_fb = median_ms(
            [lambda: fwd(*arrays), lambda: fb(*arrays, h), ref.forward, ref.forward_backward],
            repeat)

    mat = materialized_bytes(fb)

    mb = 1 / 2**20
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    machine = (f"machine: {platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} CPUs, torch {torch.__version__}, numpy {np.__version__}, "
               f"threads {args.threads_used} ({blas_line}), repeats {repeat}, "
               f"load average {load}")
    print(f"LSTM L={args.seq} N={args.batch} I={args.input} H={args.hidden}, float32, "
          "one layer; tegrad NumPy backend, torch CPU")
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
    bench_shared.print_table(f"time: median of {repeat} runs after one warm-up (ms)",
                ("pass", "tegrad ms", "torch ms", "ratio tegrad/torch"),
                [("forward", f"{t_tg_f:.1f}", f"{t_th_f:.1f}", f"{t_tg_f / t_th_f:.2f}"),
                 ("forward+backward", f"{t_tg_fb:.1f}", f"{t_th_fb:.1f}",
                  f"{t_tg_fb / t_th_fb:.2f}")],
                args.markdown)
    bench_shared.print_table("check: tegrad forward+backward against torch (float32)",
                ("tensor", "shape", "max abs diff", "max abs torch"), check_cells,
                args.markdown)
    print(f"tegrad forward-only output against torch: max abs diff {fwd_diff:.2e}")
    print()
    t_mem, r_mem = mem["tegrad"], mem["torch"]
    bench_shared.print_table("peak memory: one forward+backward in a fresh process",
                ("side", "peak RSS increase MB", "arrays MB", "arrays counted"),
                [("tegrad", f"{(t_mem['after'] - t_mem['before']) * mb:.1f}",
                  f"{mat * mb:.2f}", "every array the NumPy program makes"),
                 ("torch", f"{(r_mem['after'] - r_mem['before']) * mb:.1f}",
                  f"{r_mem['saved_bytes'] * mb:.2f}", "tensors saved for backward")],
                args.markdown)
    for side, m in mem.items():
        if m["vm_hwm"] is not None and abs(m["vm_hwm"] - m["after"]) > 16 * 2**20:
            print(f"warning: {side}: ru_maxrss {m['after'] * mb:.0f} MB but VmHWM "
                  f"{m['vm_hwm'] * mb:.0f} MB; the RSS increase is not trustworthy")
    print("tegrad: no checkpointing (the whole history is kept). Gradient checkpointing\n"
          "(storing every k-th state and recomputing the others in the backward) is not\n"
          "implemented yet. Peak RSS increase: the rise of ru_maxrss from before the inputs\n"
          "are made to after one forward+backward (baselines, after the imports: tegrad "
          f"{t_mem['before'] * mb:.0f} MB,\ntorch {r_mem['before'] * mb:.0f} MB). It counts "
          "temporaries inside kernels too, so it can exceed the arrays kept.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
