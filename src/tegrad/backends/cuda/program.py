"""``target="cuda"``: a plan run with every kernel a Triton kernel, on torch tensors.

The plan comes fused (``lower/fusion.py``, in every step plan too), without the cpu
target's loop-nest grouping and views: each general kernel, and each contraction, is one
generated kernel (``codegen.py``); a scatter is its grid's kernel, then a deterministic
segmented sum (``segments.py``); a scan runs its step program once per step through the
host's executor (``host/scan_run.py``), on tensors of the device.

Arrays are torch tensors of the device (``device.py``), allocated per kernel; a tensor no
later kernel reads is dropped at once (``host/liveness.py``), so torch's caching allocator
gives its memory to the next. Kernels run on the current stream without host
synchronization, except where a scatter sizes its segments and where a program with
gathers through ids reads its error flags once, after its last kernel.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ...lower.fusion import fuse
from ...lower.kernels import Contraction, General, Plan, ScanKernel, Scatter
from ...lower.views import as_copies
from ...options import Options
from ..feed import coerce_input
from ..host.liveness import dead_after
from ..host.scan_run import run_scan
from ..target import TargetFailed
from . import device as dev
from .codegen import KernelText, Unsupported, general_text, scatter_text
from .products import NotAProduct, Product, product_of, run_product


@dataclass
class Blueprint:
    """A fused plan and per kernel its ``KernelText`` (general kernels, contractions not
    made as einsums, scatters' grids), its ``Product`` (``products.py``) or a scan's step
    ``Blueprint``. Plain data."""

    plan: Plan
    parts: list

    def texts(self) -> list[KernelText]:
        out = []
        for part in self.parts:
            if isinstance(part, Blueprint):
                out += part.texts()
            elif isinstance(part, KernelText):
                out.append(part)
        return out


def fused(made: Plan, options: Options) -> Plan:
    """``made`` as ``lower.plan`` makes it, its producers inlined into their readers, in
    every step plan too."""
    made = fuse(as_copies(made), options)
    kernels = [replace(k, plan=fused(k.plan, options)) if isinstance(k, ScanKernel) else k
               for k in made.kernels]
    return Plan(kernels, made.outputs, made.notes)


def blueprint(made: Plan, numbers: Iterator[int] | None = None,
              options: Options | None = None) -> Blueprint:
    """The kernels of a fused plan written as Triton (named ``k0, k1, ...`` across step
    plans), contractions as einsums (``products.py``) where ``options.cuda_products``; a
    kernel the generator cannot write fails the target, saying which."""
    numbers = itertools.count() if numbers is None else numbers
    options = options or Options.from_environment()
    parts: list = []
    for kernel in made.kernels:
        try:
            if isinstance(kernel, General):
                parts.append(general_text(f"k{next(numbers)}", kernel.body_of))
            elif isinstance(kernel, Contraction):
                parts.append(_product(kernel, numbers, options))
            elif isinstance(kernel, Scatter):
                parts.append(scatter_text(f"k{next(numbers)}", kernel.scatter))
            elif isinstance(kernel, ScanKernel):
                parts.append(blueprint(kernel.plan, numbers, options))
            else:
                raise Unsupported(f"a {kernel.kind} kernel")
        except Unsupported as error:
            raise TargetFailed(f"target 'cuda' cannot write {kernel.tensor.name}: {error}") \
                from error
    return Blueprint(made, parts)


def _product(kernel: Contraction, numbers: Iterator[int], options: Options):
    """A contraction as einsums of views, else as a general kernel."""
    if options.cuda_products:
        try:
            return product_of(kernel.contraction)
        except NotAProduct:
            pass
    return general_text(f"k{next(numbers)}", kernel.tensor)


class Launch:
    """One generated kernel bound to its jit function and launch configuration."""

    def __init__(self, text: KernelText):
        from .compiler import kernel_function
        from .launch import grid, launch_blocks

        self.text = text
        self.function = kernel_function(text)
        self.blocks = launch_blocks(text, dev.interpreting())
        self.grid = grid(text, self.blocks.x)

    def __call__(self, outputs: list, reads: list, err) -> None:
        if self.text.numel == 0 or self.text.columns == 0:
            return
        extra = [err] if self.text.gathers else []
        b = self.blocks
        self.function[self.grid](*outputs, *reads, *extra, XBLOCK=b.x, RBLOCK=b.r, CBLOCK=b.c,
                                 num_warps=b.warps)


class CudaProgram:
    """A blueprint's kernels, run in plan order on the device's tensors. ``run(feed)``
    takes torch tensors of the device or NumPy arrays (by placeholder) and returns torch
    tensors where it was given any, else NumPy arrays."""

    def __init__(self, made: Blueprint, inputs, options: Options | None = None):
        import torch

        self.options = options = options or Options.from_environment()
        self.plan = made.plan
        self.inputs = inputs
        self.device = dev.device()
        self.dead_after = dead_after(self.plan, options.free_unread)
        self.gathers = [(kernel.tensor.name, m)  # (owner, message) per pair of error slots
                        for kernel, part in zip(self.plan.kernels, made.parts, strict=True)
                        if isinstance(part, KernelText) for m in part.gathers]
        self.err = (torch.zeros(2 * len(self.gathers), dtype=torch.int64, device=self.device)
                    if self.gathers else None)
        self.steps: list = []
        first = 0  # each kernel's flags: its own slots of the error buffer
        for kernel, part in zip(self.plan.kernels, made.parts, strict=True):
            if isinstance(part, Blueprint):
                self.steps.append(CudaProgram(part, kernel.step.placeholders(), options))
            elif isinstance(part, Product):
                self.steps.append(part)
            else:
                slots = 2 * len(part.gathers)
                err = self.err[first:first + slots] if slots else None
                self.steps.append((Launch(part), err))
                first += slots

    def coerce(self, p, a):
        """A call's array for placeholder ``p``: a torch tensor checked as ``coerce_input``
        checks arrays (kept as it is), anything else through ``coerce_input``."""
        if not dev.is_tensor(a):
            return coerce_input(p, a)
        if tuple(a.shape) != p.shape:
            raise ValueError(f"placeholder {p.name}: expected shape {p.shape}, "
                             f"received {tuple(a.shape)}")
        name = str(a.dtype).removeprefix("torch.")
        if name != p.dtype and (name == "bool" or p.dtype == "bool"
                                or (name.startswith("float") != p.dtype.startswith("float"))):
            raise TypeError(f"placeholder {p.name}: expected dtype {p.dtype}, received {name}")
        return a

    def run(self, feed: dict) -> list:
        given_tensors = any(dev.is_tensor(a) for a in feed.values())
        arrays = {p: dev.to_device(a, self.device, p.dtype) for p, a in feed.items()}
        results = self.run_tensors(arrays)
        return results if given_tensors else [dev.to_numpy(r) for r in results]

    def run_tensors(self, arrays: dict) -> list:
        if self.err is not None:
            self.err.zero_()
        for k, (kernel, step) in enumerate(zip(self.plan.kernels, self.steps, strict=True)):
            if isinstance(step, CudaProgram):
                arrays.update(run_scan(kernel, arrays, step.step_program, self._empty))
            elif isinstance(kernel, Scatter):
                arrays[kernel.tensor] = self._scatter(kernel, step, arrays)
            elif isinstance(step, Product):
                arrays[kernel.tensor] = run_product(step, arrays, self.device)
            else:
                arrays[kernel.tensor] = self._general(kernel, step, arrays)
            for t in self.dead_after[k]:
                arrays.pop(t, None)
        if self.err is not None:
            self._raise_bad_gathers()
        return [arrays[t] for t in self.plan.outputs]

    def _general(self, kernel, step, arrays: dict):
        import torch

        launch, err = step
        shape, dtype = launch.text.outputs[0]
        out = torch.empty(shape, dtype=dev.torch_dtype(dtype), device=self.device)
        launch([out], [arrays[t] for t in launch.text.reads], err)
        if launch.text.splits == 1:
            return out
        # a split reduction's partials, folded in order (codegen.split_reduction)
        fold = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[launch.text.fold]
        folded = fold(out, dim=-1)
        return folded.to(dev.torch_dtype(kernel.tensor.dtype))

    def _scatter(self, kernel: Scatter, step, arrays: dict):
        import torch

        from .segments import scatter_add

        launch, err = step
        grid_shape, accumulate = launch.text.outputs[1]
        targets = torch.empty(grid_shape, dtype=torch.int64, device=self.device)
        values = torch.empty(grid_shape, dtype=dev.torch_dtype(accumulate), device=self.device)
        launch([targets, values], [arrays[t] for t in launch.text.reads], err)
        s = kernel.scatter
        summed = scatter_add(targets.reshape(-1), values.reshape(-1), math.prod(s.shape))
        return summed.reshape(s.shape).to(dev.torch_dtype(s.out_dtype))

    def _raise_bad_gathers(self) -> None:
        flags = self.err.cpu().tolist()
        for g, (owner, message) in enumerate(self.gathers):
            if flags[2 * g]:
                raise IndexError(f"{owner}: " + message.format(value=flags[2 * g + 1]))

    def _empty(self, shape, dtype):
        import torch

        return torch.empty(tuple(shape), dtype=dev.torch_dtype(str(dtype)), device=self.device)

    def step_program(self, plan: Plan, inputs) -> CudaProgram:
        """This scan step's program (``run_scan`` asks for it by plan)."""
        return _StepProgram(self)


class _StepProgram:
    """A step program as ``run_scan`` calls it: a feed of rows (tensors of the device, or
    NumPy zeros and the step's time) to the step's outputs, as tensors."""

    def __init__(self, program: CudaProgram):
        self.program = program

    def run(self, feed: dict) -> list:
        p = self.program
        return p.run_tensors({q: dev.to_device(a, p.device, q.dtype) for q, a in feed.items()})
