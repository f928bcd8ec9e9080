"""Time to the first training step of ResNet-50 (float32, loss and every parameter
gradient), from an empty cache and again warm: each in a new process, the cold one with a
fresh ``TEGRAD_CACHE_DIR``, the warm one with the same directory after it.

Each process reports where its seconds went, as wall time and as CPU time (its threads'
and its finished children's, gcc's: on a loaded machine the steadier of the two):
``gradient`` (``tg.gradient``, or its load from the cache), ``plan`` (contractions,
fusion, grouping), ``C`` (the kernels' loop nests rendered), ``gcc`` (the kernels not
compiled before, compiled and linked), ``load`` (the stored program read back, cached
libraries opened), ``first call`` (the first step: products' layouts recorded, buffers
allocated), ``other`` (the rest of ``tg.build``: keys, pickling, binding); then the
second call's, the step itself. The last line counts the kernels, the distinct ones
(compiled once each, ``backends/cpu/kernel_cache.py``) and the gcc runs.

    .venv/bin/python benchmarks/bench_first_call.py [--arch resnet50] [--batch 8]
        [--image 64] [--classes 10] [--torch N] [--keep DIR] [--profile FILE]

``--torch N`` then times the warm process's step against torch's (the same network and
weights, ``tests/torch_models.py``), N runs each, alternately: the median ratio.
``--profile FILE`` runs the cold process under cProfile and writes its stats to FILE
(``python -m pstats FILE``); ``--keep DIR`` uses (and keeps) DIR as the cache. It runs
on a tree from before the kernel cache too (``PYTHONPATH=/tmp/base/src``; the counts
then print as -1), to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PHASES = ("gradient", "plan", "C", "gcc", "load", "first call", "other")


class Clock:
    """Wall and CPU seconds (this process's threads and its finished children: gcc)."""

    @staticmethod
    def now() -> tuple[float, float]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.perf_counter(), time.process_time() + children.ru_utime + children.ru_stime

    def __init__(self):
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.inside = threading.local()  # phases do not nest: an inner one counts in the outer

    def add(self, phase: str, since: tuple[float, float]) -> None:
        wall, cpu = self.now()
        self.wall[phase] += wall - since[0]
        self.cpu[phase] += cpu - since[1]

    def wrap(self, owner, attribute: str, phase: str) -> None:
        """Time ``owner.attribute`` as ``phase`` when the main thread calls it."""
        inner = getattr(owner, attribute)

        def timed(*a, **k):
            if getattr(self.inside, "phase", None) or threading.current_thread() is not MAIN:
                return inner(*a, **k)
            self.inside.phase = phase
            since = self.now()
            try:
                return inner(*a, **k)
            finally:
                self.add(phase, since)
                self.inside.phase = None
        setattr(owner, attribute, timed)


MAIN = threading.main_thread()


def child(args) -> None:
    """One process: build the training step and run it twice; print the phases as JSON."""
    import numpy as np

    import tegrad as tg
    from tegrad.backends import runtime
    from tegrad.backends.cpu import compiler, program
    from tegrad.cache import disk
    from tegrad.models import resnet, resnet_parameters

    try:
        from tegrad.backends.cpu import kernel_cache
    except ImportError:  # a tree from before it (one library per program)
        kernel_cache = None
    clock = Clock()
    clock.wrap(runtime, "plan", "plan")
    clock.wrap(runtime, "compiled", "plan")
    clock.wrap(program, "blueprint", "C")
    clock.wrap(kernel_cache or compiler, "_compile", "gcc")
    clock.wrap(compiler, "_cached", "load")
    clock.wrap(disk.serialize, "load", "load")

    params = resnet_parameters(args.arch, args.classes, dtype="float32")
    x = tg.placeholder((args.batch, 3, args.image, args.image), "float32", name="x")
    target = tg.placeholder((args.batch,), "int64", name="target")
    loss = tg.nn.cross_entropy(resnet(x, params, args.arch), target)
    names = list(params)

    since = clock.now()
    clock.inside.phase = "gradient"  # (a gradient loaded from the cache: in "gradient")
    grads = tg.gradient(loss, [params[n] for n in names])
    clock.inside.phase = None
    clock.add("gradient", since)
    since = clock.now()
    step = tg.build([x, target, *params.values()], [loss, *grads])
    clock.add("other", since)
    for table in (clock.wall, clock.cpu):
        table["other"] -= sum(table[p] for p in ("plan", "C", "gcc", "load"))

    rng = np.random.default_rng(0)
    feed = [rng.standard_normal(x.shape, dtype=np.float32),
            rng.integers(0, args.classes, size=args.batch)]
    feed += [rng.standard_normal(p.shape, dtype=np.float32) * 0.05 for p in params.values()]
    since = clock.now()
    step(*feed)
    clock.add("first call", since)
    second = clock.now()
    step(*feed)
    second = [b - a for a, b in zip(second, clock.now(), strict=True)]
    ratio = against_torch(args, step, feed, names) if args.torch and args.warm else None
    print(json.dumps({"wall": clock.wall, "cpu": clock.cpu, "second call": second,
                      "torch ratio": ratio,
                      "kernels": len(step.program.plan.kernels),
                      "gcc runs": compiler.STATS["gcc runs"] if kernel_cache else -1,
                      "compiled": kernel_cache.STATS["kernels compiled"] if kernel_cache else -1,
                      "asked": kernel_cache.STATS["kernels asked"] if kernel_cache else -1}))


def against_torch(args, step, feed, names) -> dict:
    """The step's seconds over torch's (the same network and weights, 2 threads), run
    alternately ``args.torch`` times each: the median ratio and the spread."""
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from torch_models import ResNet

    torch.set_num_threads(int(os.environ.get("TEGRAD_NUM_THREADS", "2")))
    module = ResNet(args.arch, args.classes, 64).float().train()
    state = {n: p.detach().numpy() for n, p in module.named_parameters()}
    feed = [*feed[:2], *(state[n] for n in names)]
    images, labels = torch.from_numpy(feed[0]), torch.from_numpy(feed[1])

    def torch_step():
        module.zero_grad()
        torch.nn.functional.cross_entropy(module(images), labels).backward()

    torch_step()
    ratios = []
    for _ in range(args.torch):
        start = time.perf_counter()
        step(*feed)
        ours = time.perf_counter() - start
        start = time.perf_counter()
        torch_step()
        ratios.append(ours / (time.perf_counter() - start))
    return {"median": float(np.median(ratios)), "low": min(ratios), "high": max(ratios)}


def run_child(argv: list[str], cache: str, profile: str | None) -> dict:
    env = {**os.environ, "TEGRAD_CACHE_DIR": cache, "TEGRAD_GRAPH_CACHE": "1"}
    command = [sys.executable]
    if profile:
        command += ["-m", "cProfile", "-o", profile]
    command += [__file__, "--child", *argv]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--keep", default=None)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--torch", type=int, default=0,
                        help="warm: time this many steps against torch's, alternately")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--warm", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    argv = ["--arch", args.arch, "--batch", str(args.batch), "--image", str(args.image),
            "--classes", str(args.classes)]
    with tempfile.TemporaryDirectory(prefix="tegrad-first-call-") as fresh:
        cache = args.keep or fresh
        Path(cache).mkdir(parents=True, exist_ok=True)
        rows = [("cold", run_child(argv, cache, args.profile)),
                ("warm", run_child([*argv, "--warm", "--torch", str(args.torch)], cache,
                                   None))]
    print(f"{args.arch} training step, float32, {args.batch}x3x{args.image}x{args.image}, "
          f"{args.classes} classes")
    for table, what in (("wall", "wall seconds"), ("cpu", "CPU seconds (gcc's too)")):
        print(f"{what:24}" + "".join(f"{p:>11}" for p in (*PHASES, "total", "2nd call")))
        for name, got in rows:
            cells = [got[table][p] for p in PHASES]
            cells += [sum(cells), got["second call"][0 if table == "wall" else 1]]
            print(f"{name:24}" + "".join(f"{c:11.2f}" for c in cells))
    cold = rows[0][1]
    print(f"{cold['kernels']} kernels; cold: {cold['asked']} distinct compiled kernels, "
          f"{cold['compiled']} compiled, {cold['gcc runs']} gcc runs; warm: "
          f"{rows[1][1]['compiled']} compiled, {rows[1][1]['gcc runs']} gcc runs")
    ratio = rows[1][1]["torch ratio"]
    if ratio:
        print(f"warm step / torch's, {args.torch} alternate runs: median {ratio['median']:.2f} "
              f"(from {ratio['low']:.2f} to {ratio['high']:.2f})")


if __name__ == "__main__":
    main()
