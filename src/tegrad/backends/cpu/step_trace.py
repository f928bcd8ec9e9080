"""A scan's step program run by addresses: the per-step Python of ``CpuProgram`` cut out.

A scan calls its step program once per step (an LSTM: 50 steps, each a ``32 x 256 x 1024``
product and one fused kernel). The general path does Python work around them at every
step: a feed dictionary copied, the pool asked for every output, each read's layout
checked, a contraction's layout key built and looked up.

Every step feeds arrays of the same layouts (rows of the same histories and inputs), so
after the step program has run once the work of a step is fixed: ``StepTrace`` holds, per
kernel, the compiled function or the contraction's recorded calls (``replay.py``), and
where each of its operands lies. An operand is either

- a placeholder of the step (a lagged state row, a row of an input, a whole input, the
  step number): its address is read from the feed at each step, after checking that the
  array has the dtype and strides the trace was made for, or
- a tensor the step computes: a buffer of the trace, allocated once.

A step whose feed differs in layout (``None`` from ``run``) takes the general path. A
computed output is written straight into the row the scan gives for it (its history's
row ``t``, ``scan_run._Stepper``), when that row has its buffer's layout; otherwise into
the trace's buffer, rewritten by the next step, which the scan copies out first. A trace
is made per thread, so two threads running one program never share its buffers.
"""

from __future__ import annotations

import numpy as np

from .gemm import GemmCall
from .kernel_call import CompiledKernel
from .packed import fixed_operand_product
from .replay import ReplayedContraction, data_address


class StepTrace:
    """The kernels of ``program`` (a ``CpuProgram`` of a scan step), bound to buffers
    after a run on ``feed``; ``make`` returns None where a kernel is not one of the two
    kinds a trace can make (a compiled kernel, a contraction with a recorded layout)."""

    @classmethod
    def make(cls, program, feed: dict, threads: int) -> StepTrace | None:
        kinds = (CompiledKernel, ReplayedContraction)
        if not all(isinstance(s, kinds) for s in program.steps):
            return None
        if not all(type(a) is np.ndarray for a in feed.values()):
            return None
        trace = cls(program, feed, threads)
        return trace if trace.calls is not None else None

    def __init__(self, program, feed: dict, threads: int):
        self.threads = threads
        self.shared_rows_bytes = program.options.shared_rows_bytes
        self.slot: dict = {}  # tensor -> index in the address list
        self.fed: list = []  # (slot, placeholder, dtype, strides) read from the feed
        self.buffers: dict = {}  # computed tensor -> its buffer
        stepwise = set(program.inputs)  # the rest of the feed is fixed over a run
        self.fixed = {p for p in feed if p not in stepwise}
        self.packs: list = []  # RowsGemm or PackedGemm, reset at each run of the scan
        for p, a in feed.items():
            self.fed.append((self._slot(p), p, a.dtype, a.strides))
        self.calls: list | None = []
        self.forms: list = []  # each call's parts, for a loop over steps (step_loop.py)
        for kernel, step in zip(program.plan.kernels, program.steps, strict=True):
            call = (self._kernel(step) if isinstance(step, CompiledKernel)
                    else self._contraction(step, kernel.tensor, feed))
            if call is None:
                self.calls = None
                return
            self.calls.append(call)
        self.outputs = [(self.buffers.get(t), t) for t in program.plan.outputs]
        for buffer, t in self.outputs:
            if buffer is None and t not in feed:
                self.calls = None
                return
        self.addresses = [0] * len(self.slot)
        for t, buffer in self.buffers.items():
            self.addresses[self.slot[t]] = data_address(buffer)
        self.current = dict(self.buffers)  # where each computed tensor is written this step

    def _slot(self, t) -> int:
        if t not in self.slot:
            self.slot[t] = len(self.slot)
        return self.slot[t]

    def _buffer(self, t, shape, dtype) -> int:
        self.buffers[t] = np.empty(shape, dtype)
        return self._slot(t)

    def _kernel(self, compiled):
        """``call(addresses)`` for a compiled kernel: its outputs in buffers of the trace;
        a read must be a C-order array of its dtype (a fed one is checked at each step)."""
        src = compiled.src
        slots = [self._buffer(src.tensor, compiled.shape, compiled.dtype)]
        slots += [self._buffer(u, shape, dtype) for u, shape, dtype in compiled.written]
        for a, dtype, strides in compiled.reads:
            if a in self.buffers:
                slots.append(self.slot[a])
                continue
            known = [(p_dtype, p_strides) for _, p, p_dtype, p_strides in self.fed if p is a]
            if known != [(dtype, strides)]:
                return None  # (the general path copies such a read to C order)
            slots.append(self.slot[a])
        fn, pointers, err = compiled.bound(), compiled.pointers, compiled.err_address
        self.forms.append(("kernel", compiled, slots))

        def call(addresses):
            fn(pointers(*[addresses[k] for k in slots]), err, self.threads)
            if compiled.err[0]:
                compiled.raise_error()

        return call

    def _contraction(self, contraction: ReplayedContraction, tensor, feed: dict):
        """``call(addresses)`` through the contraction's recorded calls for the layout its
        operands have (recorded by the run before the trace)."""
        arrays = {**feed, **self.buffers}
        if any(t not in arrays for t in contraction.tensors):
            return None
        inputs = [arrays[t] for t in contraction.tensors]
        key = tuple((a.shape, a.strides, a.dtype) for a in inputs)
        recipe = contraction.recipes.get(key)
        if recipe is None:
            return None
        c = contraction.c
        self.buffers[tensor] = np.empty(c.shape, c.dtype)
        slots = [self.slot[t] for t in contraction.tensors] + [self._slot(tensor)]
        threads = self.threads
        actions = self._packed(recipe.actions, contraction.tensors)
        self.forms.append(("contraction", recipe, slots, tensor, actions))

        def call(addresses):
            recipe.replay([addresses[k] for k in slots], self.current[tensor], threads,
                          actions)

        return call

    def _packed(self, actions: list, tensors: list) -> list | None:
        """``actions`` with each product that reads a tensor fixed over the scan's run
        (fed, but not a per-step placeholder: a weight) packing it once per run
        (``packed.py``); None when there is none."""
        fixed = {k for k, t in enumerate(tensors) if t in self.fixed}
        out, any_packed = [], False
        for call, operands in actions:
            which = next((w for w in (1, 0) if operands[w][0] in fixed), None)
            packed = (fixed_operand_product(call, which, self.threads, self.shared_rows_bytes)
                      if isinstance(call, GemmCall) and which is not None else None)
            if packed is not None:
                self.packs.append(packed)
                any_packed = True
            out.append((packed or call, operands))
        return out if any_packed else None

    def new_run(self) -> None:
        """A new run of the scan: the packed operands may hold other values now."""
        for packed in self.packs:
            packed.new_run()

    def run_steps(self, start: int, stop: int, fed: dict, targets: list) -> bool:
        """Steps ``[start, stop)`` in one C call (``step_loop.py``), reading and writing
        the rows ``fed`` and ``targets`` describe; False, having run none, where that
        loop cannot take them (the caller runs them one by one)."""
        from .step_loop import StepLoop

        loop = StepLoop.make(self, fed, targets)
        if loop is None:
            return False
        failed = loop.run(start, stop, self.threads)
        if failed == -2:
            raise MemoryError("no memory for a scan's step loop")
        if failed >= 0:
            for form in self.forms:
                if form[0] == "kernel" and form[1].err[0]:
                    form[1].raise_error()
        if failed != -1:
            raise RuntimeError(f"a scan's step loop stopped at step {failed}")
        return True

    def run(self, feed: dict, targets: list | None = None) -> list | None:
        """The step's outputs, or None where the feed's layouts are not the trace's. An
        output with a target (an array of its buffer's layout: a row of a history) is
        written there directly, and the target is returned for it."""
        addresses = self.addresses
        for slot, p, dtype, strides in self.fed:
            a = feed[p]
            if type(a) is not np.ndarray or a.dtype is not dtype or a.strides != strides:
                return None
            addresses[slot] = data_address(a)
        if targets is not None:
            current, slot = self.current, self.slot
            placed = set()
            for (buffer, t), row in zip(self.outputs, targets, strict=True):
                if buffer is None or t in placed:
                    continue
                placed.add(t)
                if (type(row) is np.ndarray and row.dtype is buffer.dtype
                        and row.strides == buffer.strides and row.shape == buffer.shape):
                    current[t] = row
                else:
                    current[t] = buffer
                addresses[slot[t]] = data_address(current[t])
        for call in self.calls:
            call(addresses)
        results = [feed[t] if buffer is None else self.current[t] for buffer, t in self.outputs]
        self.current.update(self.buffers)  # (a target row would keep its history alive)
        return results
