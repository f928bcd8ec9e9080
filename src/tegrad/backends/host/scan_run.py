"""Running a scan kernel: the time loop over a step program, on any backend.

Every state's history is, by default, a ``(T, ...)`` array: the init rows, then the step
program once per step ``t in [k0, T)``, its per-step placeholders fed with rows of the
histories and of the inputs.

A state the plan checkpoints (``kernel.checkpointed``, from ``lower/checkpoint.py``) is
returned as a ``CheckpointedHistory`` instead: the steps run in segments ``[s_j, e_j)`` of
``k`` steps, each into a fresh buffer; before segment ``j`` the forward stores the rows it
restarts from (``t - 1 ... t - L`` at ``s_j``, ``L`` the state's largest lag), and keeps
the last segment's buffer. Step values the plan keeps for a backward (``kernel.saved``)
are written by the forward run only. Row ``r`` is an init row or row ``r - s_j`` of segment ``j``,
recomputed from its restart rows by the same step program on the same inputs (states
kept whole are read from their histories) when it is not among the ``segments_cached``
most recently used. A reader moving backwards in time (the adjoint scan) thus recomputes
every segment but the last once: ``T - k0 - len(last segment)`` more steps. Rows are never
overwritten once returned (each recompute fills a new buffer), so a row fed to a reader's
step stays valid however the segments are evicted.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ...lower.checkpoint import Segments, largest_lags


def run_scan(kernel, arrays: dict, make_program, empty=np.empty) -> dict:
    """The states' histories (arrays, or ``CheckpointedHistory`` for the states the plan
    checkpoints). ``make_program(plan, inputs)`` is the backend's program class, which runs
    the step plan; ``empty(shape, dtype)`` allocates a whole history (a compiled program's
    buffer pool). A row of a tensor read outside it is zeros: such reads are guarded in
    the body."""
    op = kernel.op
    stepper = _Stepper(kernel, arrays, make_program)
    # the step values the run keeps (``lower/saved_steps.py``): one array per step compute,
    # step t writing its row ``kernel.row(values, t)`` (every tensor of that compute has
    # the same rows)
    steps = kernel.kept_steps
    first = [next(v for v, y in kernel.saved.items() if y is x) for x in steps]
    kept = [empty(v.shape, v.dtype) for v in first]
    made = {values: kept[steps.index(x)] for values, x in kernel.saved.items()}
    if kernel.checkpointed:
        rows = [lambda t, v=v: kernel.row(v, t) for v in first]
        engine = _Checkpoints(kernel, stepper, arrays, kept, rows, empty)
        made.update({out: engine.whole[n] if n in engine.whole else
                     CheckpointedHistory(engine, n, out.shape, out.dtype,
                                         weak=n in kernel.unread)
                     for n, out in enumerate(op.outputs)})
        return made
    histories = []
    for init, s in zip(op.inits, op.states, strict=True):
        history = empty(s.shape, s.dtype)
        history[: op.init_rows] = arrays[init]
        histories.append(history)

    lines = [(h, 1, 0) for h in histories]  # output n at step t: row a t + b of an array
    lines += [(kept[k], *kernel.row_line(v)) for k, v in enumerate(first)]

    def target(n: int, t: int) -> np.ndarray | None:
        array, a, b = lines[n]
        r = a * t + b
        return _row(array, r) if 0 <= r < array.shape[0] else None

    stepper.run(op.init_rows, op.length, lambda n, r: _row(histories[n], r), target,
                (histories, lines))
    made.update(zip(op.outputs, histories, strict=True))
    return made


class StepRows(NamedTuple):
    """Where a per-step value lies at step ``t``: row ``coefficient t + offset`` of
    ``array``, or ``outside`` (zeros of one row's layout) when that row is not in it;
    ``outside=None`` for an output: nowhere (the program's own buffer)."""

    array: object  # an array, or a CheckpointedHistory
    coefficient: int
    offset: int
    outside: np.ndarray | None = None


def _row(array, r: int):
    """Row ``r`` of an array as an array (a 0-d one for a 1-d array, where ``array[r]``
    would be a NumPy scalar), or of a ``CheckpointedHistory``."""
    return array[r, ...] if type(array) is np.ndarray else array[r]


class _Stepper:
    """The step program with its inputs: ``run(start, stop, read_row, target)`` runs
    steps ``[start, stop)``, reading lagged state rows through ``read_row(n, r)``; output
    ``n`` of step ``t`` goes to the array ``target(n, t)`` (None: nowhere). A program with
    ``run_into(feed, targets)`` may write its outputs there itself (it returns a target
    for each output it wrote); every other output is copied there (a program may reuse
    its output buffers)."""

    def __init__(self, kernel, arrays: dict, make_program):
        step = kernel.step
        self.step = step
        self.outputs = range(len(kernel.plan.outputs))  # the states, then kept step values
        self.program = make_program(kernel.plan, step.placeholders())
        self.sliced = [(p, a, b, arrays[u]) for (u, a, b), p in step.sliced.items()]
        self.feed = {t: arrays[t] for t in step.full}
        self.zeros: dict = {}

    def run(self, start: int, stop: int, read_row, target, lines=None) -> None:
        """``lines``, where every row is an affine function of ``t`` (whole histories):
        ``(histories, outputs)``, output ``n`` of step ``t`` in row ``a t + b`` of
        ``outputs[n] = (array, a, b)`` (nowhere outside it). A program with
        ``run_steps`` may then run the steps after the first itself."""
        step, feed = self.step, self.feed
        run_into, outputs = getattr(self.program, "run_into", None), self.outputs
        if hasattr(self.program, "new_run"):  # (its packed weights: cpu/packed.py)
            self.program.new_run()
        # the first step of the program's first run makes its trace, the first of each
        # run the packs of its products' fixed operands: the loop is tried at the start
        # (a trace and no packs), then after each of those
        tries = 3 if hasattr(self.program, "run_steps") and lines is not None else 0
        rows = None
        for t in range(start, stop):
            if tries:
                rows = rows or self._rows(*lines)
                if self.program.run_steps(t, stop, *rows):
                    break
                tries -= 1
            for (n, lag), p in step.lagged.items():
                feed[p] = read_row(n, t - lag) if t - lag >= 0 else self._zeros(p)
            for p, a, b, array in self.sliced:
                row = a * t + b
                feed[p] = _row(array, row) if 0 <= row < array.shape[0] else self._zeros(p)
            feed[step.time] = np.asarray(t, step.time.dtype)
            targets = [target(n, t) for n in outputs]
            values = self.program.run(feed) if run_into is None else run_into(feed, targets)
            for value, row in zip(values, targets, strict=True):
                if row is not None and value is not row:
                    row[...] = value
        for p in [*step.lagged.values(), *step.sliced.values()]:  # rows are views: do not
            feed.pop(p, None)  # keep a segment's buffer alive through them

    def _rows(self, histories: list, outputs: list) -> tuple[dict, list]:
        """``(fed, targets)`` for ``run_steps`` (``cpu/step_loop.py``): each per-step
        placeholder's rows (zeros outside them) or ``"time"``, each input read whole, each
        output's rows."""
        step = self.step
        fed: dict = {**self.feed, step.time: "time"}  # (self.feed: the inputs read whole)
        for (n, lag), p in step.lagged.items():
            fed[p] = StepRows(histories[n], 1, -lag, self._zeros(p))
        for p, a, b, array in self.sliced:
            fed[p] = StepRows(array, a, b, self._zeros(p))
        return fed, [StepRows(array, a, b) for array, a, b in outputs]

    def _zeros(self, p) -> np.ndarray:
        if p not in self.zeros:
            self.zeros[p] = np.zeros(p.shape, p.dtype)
        return self.zeros[p]


class _Checkpoints:
    """The forward run of a checkpointed scan and the recompute of its segments, shared by
    the ``CheckpointedHistory`` of each checkpointed state (one recompute fills them all)."""

    def __init__(self, kernel, stepper: _Stepper, arrays: dict, kept: list, rows: list,
                 empty=np.empty):
        op = kernel.op
        self.op, self.stepper, self.kept, self.rows = op, stepper, kept, rows
        self.empty = empty  # (the backend's arrays: NumPy's, or a device's tensors)
        self.segments = Segments(op.init_rows, op.length, op.checkpoint)
        self.marked = sorted(kernel.checkpointed)
        lags = largest_lags(kernel.step, len(op.states))
        self.lags = {n: lags[n] for n in self.marked}
        self.capacity = max(1, kernel.segments_cached)
        self.init = {}
        for n in self.marked:
            self.init[n] = empty(arrays[op.inits[n]].shape, op.states[n].dtype)
            self.init[n][...] = arrays[op.inits[n]]
        # the states kept whole; the engine holds no CheckpointedHistory (they hold it),
        # so it is freed with the last of them, without waiting for the cycle collector
        self.whole: dict[int, np.ndarray] = {}
        for n, (init, s) in enumerate(zip(op.inits, op.states, strict=True)):
            if n not in self.init:
                self.whole[n] = empty(s.shape, s.dtype)
                self.whole[n][: op.init_rows] = arrays[init]
        self.restart: list[dict[int, np.ndarray]] = []
        self.cache: OrderedDict[int, dict[int, np.ndarray]] = OrderedDict()
        self.recomputed_steps = 0
        self._forward()

    def _forward(self) -> None:
        buffers = None
        for j in range(self.segments.count):
            if j:  # restart rows: the previous segment's reader has them all
                read = self._reader(j - 1, buffers)
                self.restart.append({n: self._stack(n, [read(n, r) for r in
                                                        self.segments.restart_rows(j, lag)])
                                     for n, lag in self.lags.items()})
            else:  # segment 0 restarts from the init rows
                self.restart.append({n: self._stack(n, []) for n in self.marked})
            buffers = self._run_segment(j, forward=True)
        self.cache[self.segments.count - 1] = buffers

    def _stack(self, n: int, rows: list) -> np.ndarray:
        state = self.op.states[n]
        stacked = self.empty((len(rows), *state.shape[1:]), state.dtype)
        for k, row in enumerate(rows):
            stacked[k] = row
        return stacked

    def _reader(self, j: int, buffers: dict):
        """``read(n, r)``: state ``n``'s row ``r`` while segment ``j`` runs (``r`` below
        the segment: restart or init rows; inside: the segment's own buffer)."""
        start = self.segments.bounds(j)[0]
        restart, whole = self.restart[j], self.whole

        def read(n: int, r: int):
            if n in whole:
                return _row(whole[n], r)
            if r >= start:
                return _row(buffers[n], r - start)
            if r < self.op.init_rows:
                return _row(self.init[n], r)
            rows = restart[n]
            return _row(rows, r - (start - len(rows)))

        return read

    def _run_segment(self, j: int, forward: bool) -> dict[int, np.ndarray]:
        start, stop = self.segments.bounds(j)
        buffers = {n: self.empty((stop - start, *self.op.states[n].shape[1:]),
                                 self.op.states[n].dtype) for n in self.marked}
        whole = self.whole

        states, kept = len(self.op.states), self.kept

        def target(n: int, t: int) -> np.ndarray | None:
            if n in buffers:
                return _row(buffers[n], t - start)
            if not forward:  # a recompute: states kept whole and kept step values
                return None  # were written by the forward run
            if n < states:
                return _row(whole[n], t)
            r = self.rows[n - states](t)
            return None if r is None else _row(kept[n - states], r)

        self.stepper.run(start, stop, self._reader(j, buffers), target)
        return buffers

    def row(self, n: int, r: int) -> np.ndarray:
        if r < self.op.init_rows:
            return _row(self.init[n], r)
        j = self.segments.of_row(r)
        buffers = self.cache.get(j)
        if buffers is None:
            buffers = self._run_segment(j, forward=False)
            start, stop = self.segments.bounds(j)
            self.recomputed_steps += stop - start
            self.cache[j] = buffers
            while len(self.cache) > self.capacity:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(j)
        return _row(buffers[n], r - self.segments.bounds(j)[0])

    def stored_bytes(self, n: int) -> int:
        held = [self.init[n], *(rows[n] for rows in self.restart),
                *(buffers[n] for buffers in self.cache.values())]
        return sum(a.nbytes for a in held)


class CheckpointedHistory:
    """State ``n``'s history ``(T, ...)`` of a checkpointed scan, standing for the array:
    ``history[r]`` (an integer row) returns the row, recomputing its segment when it is not
    cached; ``np.asarray(history)`` rebuilds the whole array (every segment recomputed:
    the planner gives a checkpointed history only row readers, so this is for tests and
    debugging). ``nbytes`` is what it holds now, ``full_nbytes`` what the array would.

    The checkpoints live as long as a history holding them: ``weak`` (for a state no
    kernel reads, which a program keeps to its end) does not hold them."""

    def __init__(self, engine: _Checkpoints, n: int, shape: tuple[int, ...], dtype: str,
                 weak: bool = False):
        self._held = None if weak else engine
        self._weak = weakref.ref(engine)
        self._n, self._name = n, engine.op.outputs[n].name
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)

    @property
    def _engine(self) -> _Checkpoints:
        engine = self._weak()
        if engine is None:
            raise RuntimeError(f"the checkpoints of {self._name} are freed: the plan found "
                               "no reader of this history")
        return engine

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, row) -> np.ndarray:
        if isinstance(row, (bool, np.bool_)) or not isinstance(row, (int, np.integer)):
            raise TypeError(
                f"checkpointed history of {self._name}: only "
                f"single rows (history[r]) can be read, not {row!r}; np.asarray(history) "
                "rebuilds the whole array")
        r = int(row) + (self.shape[0] if row < 0 else 0)
        if not 0 <= r < self.shape[0]:
            raise IndexError(f"row {row} of a history of {self.shape[0]} rows")
        return self._engine.row(self._n, r)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = np.empty(self.shape, self.dtype)
        for r in range(self.shape[0]):
            row = self[r]
            whole[r] = row.cpu().numpy() if hasattr(row, "cpu") else row  # (a device's)
        return whole if dtype is None else whole.astype(dtype)

    @property
    def nbytes(self) -> int:
        return self._engine.stored_bytes(self._n)

    @property
    def full_nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def recomputed_steps(self) -> int:
        """Steps recomputed so far for this scan's checkpointed states (all of them)."""
        return self._engine.recomputed_steps

    def __repr__(self) -> str:
        engine = self._weak()
        held = "freed" if engine is None else f"holding {self.nbytes} of"
        return (f"CheckpointedHistory({self._name}, shape={self.shape}, {held} "
                f"{self.full_nbytes} bytes)")
