"""What the training examples share: optimizers on both sides, the training loops
(tegrad eager and PyTorch, same batches), the progress bar, the loss-curve plot and the
curve comparison. Imported by ``train_digits.py``, ``train_char_lstm.py`` and
``tests/test_training.py`` (which put ``examples/`` on ``sys.path``).

BLAS threads: on a small shared machine OpenBLAS's threads wait on each other for the
small products of these models (a 16x128 @ 128x512 product took 8-15 ms with 2 threads
beside another busy process, 0.08 ms with one). ``limit_threads(n)`` limits NumPy's BLAS
(threadpoolctl, a scikit-learn dependency) and torch's intra-op threads alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

import tegrad as tg
from tegrad.optim import SGD, Adam

OPTIMIZERS = ("sgd", "adam")


# -- optimizers -------------------------------------------------------------------------
def tegrad_optimizer(name: str, params: Sequence[tg.Variable], lr: float,
                     momentum: float = 0.9, jit: bool = False):
    if name == "sgd":
        return SGD(params, lr=lr, momentum=momentum, jit=jit)
    if name == "adam":
        return Adam(params, lr=lr, jit=jit)
    raise ValueError(f"unknown optimizer {name!r} (expected one of {OPTIMIZERS})")


def torch_optimizer(name: str, params: Iterable, lr: float, momentum: float = 0.9):
    import torch
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r} (expected one of {OPTIMIZERS})")


# -- threads ----------------------------------------------------------------------------
@contextlib.contextmanager
def limit_threads(n: int | None):
    """NumPy's BLAS and torch's intra-op pool limited to ``n`` threads (None: as is)."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits
    torch_threads = None
    try:
        import torch
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(n)
    except ImportError:
        pass
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        if torch_threads is not None:
            import torch
            torch.set_num_threads(torch_threads)


# -- training loops ---------------------------------------------------------------------
class Run:
    """The losses of a training run and the time of each step."""

    def __init__(self, label: str):
        self.label = label
        self.losses: list[float] = []
        self.times: list[float] = []

    @property
    def wall(self) -> float:
        return float(sum(self.times))

    def steps_per_second(self, skip: int = 5) -> float:
        """Steady state: the steps after the first ``skip`` (which compile templates)."""
        times = self.times[skip:] if len(self.times) > skip else self.times
        return len(times) / max(sum(times), 1e-12)


def train_tegrad(loss_fn: Callable, params: dict[str, tg.Variable], batches: Sequence,
                 optimizer, progress=None, label: str = "tegrad") -> Run:
    """``loss_fn(params, *batch) -> 0-d Variable``; one tape and one optimizer step per
    batch."""
    run = Run(label)
    names = list(params)
    for batch in batches:
        start = time.perf_counter()
        with tg.GradientTape() as tape:
            loss = loss_fn(params, *batch)
        grads = tape.gradient(loss, [params[n] for n in names])
        optimizer.step(grads)
        run.times.append(time.perf_counter() - start)
        run.losses.append(float(loss))
        if progress is not None:
            progress(run)
    return run


def train_torch(loss_fn: Callable, module, batches: Sequence, optimizer, progress=None,
                label: str = "torch") -> Run:
    """The same loop in PyTorch: ``loss_fn(module, *batch) -> 0-d tensor``."""
    import torch
    run = Run(label)
    for batch in batches:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(module, *(torch.from_numpy(np.asarray(b)) for b in batch))
        loss.backward()
        optimizer.step()
        run.times.append(time.perf_counter() - start)
        run.losses.append(loss.item())
        if progress is not None:
            progress(run)
    return run


def curve_difference(a: Sequence[float], b: Sequence[float], steps: int | None = None
                     ) -> float:
    """The largest ``|a_k - b_k| / |b_k|`` over the first ``steps`` steps."""
    n = min(len(a), len(b)) if steps is None else steps
    a, b = np.asarray(a[:n], np.float64), np.asarray(b[:n], np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


# -- presentation -----------------------------------------------------------------------
@contextlib.contextmanager
def progress_bar(total: int, description: str, enabled: bool = True):
    """A rich progress bar; yields ``update(run)`` (advance one step, show the loss)."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total, loss="-")

        def update(run: Run) -> None:
            progress.update(task, advance=1, loss=f"{run.losses[-1]:.4f}")
        yield update


def plot_curves(path: Path, runs: Sequence[Run], title: str) -> Path:
    """The loss curves of ``runs`` in one PNG (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for k, run in enumerate(runs):
        ax.plot(np.arange(1, len(run.losses) + 1), run.losses, label=run.label,
                lw=1.2, ls="-" if k == 0 else "--")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (batch)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def add_common_arguments(parser, steps: int, default_lr: dict[str, float]) -> None:
    """The options both training scripts take; ``--lr`` defaults to ``default_lr`` of
    the optimizer (read it with ``learning_rate(args, default_lr)``)."""
    parser.add_argument("--steps", type=int, default=steps, help="training steps (batches)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    parser.add_argument("--lr", type=float, default=None,
                        help=f"learning rate (default: {default_lr})")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("reports/training"),
                        help="folder for the loss-curve PNG")
    parser.add_argument("--compare-torch", action="store_true",
                        help="train the same model in PyTorch from the same weights and "
                             "batches; report the largest relative loss-curve difference")
    parser.add_argument("--jit-optimizer", action="store_true",
                        help="each parameter's update traced as one graph (tg.jit)")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS / torch threads (0: leave as is)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def learning_rate(args, default_lr: dict[str, float]) -> float:
    return args.lr if args.lr is not None else default_lr[args.optimizer]
