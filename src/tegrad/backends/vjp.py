"""``tg.build_vjp``: a forward that keeps what its backward reads, and that backward.

``tg.build([*inputs, head], grads)`` makes a gradient program that recomputes the forward
values it needs. A framework's autograd instead runs the forward once, keeps some of its
values, and runs the backward later on them. ``build_vjp`` does that: the plan of the
output and its gradients is cut where the backward begins (``lower/split.py``); the
forward returns the output and a ``Saved`` holding what the backward reads (inputs and
forward values: an LSTM's hidden and cell histories and its ``h W_hh^T`` per step), and
the backward takes that and a head. The backward is as generated as any other: nothing is
hand-written, only the program is cut in two.

The forward keeps references to the input arrays the backward reads, not copies (as
``torch.autograd`` saves tensors): changing them in place before the backward changes
the gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import dtype as dt
from ..ir.tensor import Placeholder, Tensor, placeholder
from ..lower.plan import plan
from ..lower.split import split_plan
from ..options import Options
from .feed import checked_feed, coerce_input, input_specs
from .runtime import check_signature, checked_options, make_programs


class Saved:
    """What one forward call kept for its backward: ``names`` and ``nbytes`` say what and
    how much (arrays held, inputs included)."""

    __slots__ = ("_pair", "_values")

    def __init__(self, pair: object, values: dict):
        self._pair = pair
        self._values = values

    @property
    def names(self) -> list[str]:
        return [t.name for t in self._values]

    @property
    def nbytes(self) -> int:
        return sum(getattr(a, "nbytes", 0) for a in self._values.values())

    def __repr__(self) -> str:
        return f"Saved({len(self._values)} tensors, {self.nbytes} bytes)"


class SplitVJP:
    """Two programs from the joint plan of ``outputs`` and their gradients ``grads``
    (given ``heads``): ``forward(feed)`` returns the outputs' arrays and the values the
    backward reads; ``backward(values, head_arrays)`` the gradients' arrays."""

    def __init__(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                 heads: Sequence[Tensor], grads: Sequence[Tensor], target: str | None = None,
                 options: Options | None = None):
        options = checked_options(options)

        self.outputs, self.heads = list(outputs), list(heads)

        def plans():
            first, second, residuals, read = split_plan(plan([*self.outputs, *grads],
                                                             options=options),
                                                        self.outputs, list(grads))
            kept = [p for p in read if not any(p is h for h in self.heads)]
            return [(first, list(inputs)), (second, [*kept, *residuals, *self.heads])]

        self.target, (self.forward_program, self.backward_program) = make_programs(
            plans, target, remember=(list(inputs), self.outputs, self.heads, list(grads)),
            options=options)
        # the backward's inputs, from its program: plans() does not run when the cpu
        # target loads them from the disk cache. Kept inputs are placeholders; residuals,
        # made by the forward, are not.
        taken = self.backward_program.inputs[:len(self.backward_program.inputs)
                                             - len(self.heads)]
        self.kept_inputs = [t for t in taken if isinstance(t, Placeholder)]
        self.residuals = [t for t in taken if not isinstance(t, Placeholder)]
        # the tensors a backward reads, inputs first
        self.saved_tensors = [*self.kept_inputs, *self.residuals]

    def forward(self, feed: dict) -> tuple[list, dict]:
        results = self.forward_program.run(feed)
        values = {p: feed[p] for p in self.kept_inputs}
        made = dict(zip(self.forward_program.plan.outputs, results, strict=True))
        values.update((t, made[t]) for t in self.residuals)
        return results[:len(self.outputs)], values

    def backward(self, values: dict, head_arrays: Sequence) -> tuple:
        return tuple(self.backward_program.run(
            {**values, **dict(zip(self.heads, head_arrays, strict=True))}))


def build_vjp(inputs: Sequence[Tensor], output: Tensor, wrt: Sequence[Tensor] | None = None,
              target: str | None = None, options: Options | None = None):
    """``(forward, backward)``: ``forward(*arrays) -> (output array, saved)`` and
    ``backward(saved, head) -> tuple of gradients``, one per tensor of ``wrt`` (default:
    every float input), each of its input's shape."""
    ins = list(inputs)
    if not isinstance(output, Tensor):
        raise TypeError(f"build_vjp: output must be one tegrad Tensor, got "
                        f"{type(output).__name__}")
    check_signature(ins, [output])
    if not dt.is_float(output.dtype):
        raise ValueError(f"build_vjp: output {output.name} is {output.dtype}; only a float "
                         "output has a gradient")
    wrt = [p for p in ins if dt.is_float(p.dtype)] if wrt is None else list(wrt)
    for p in wrt:
        if not any(p is q for q in ins):
            raise ValueError(f"build_vjp: {getattr(p, 'name', p)} in wrt is not in inputs")
        if not dt.is_float(p.dtype):
            raise ValueError(f"build_vjp: {p.name} in wrt is {p.dtype}; only float inputs "
                             "have gradients")
    if not wrt:
        raise ValueError("build_vjp: no float input to differentiate with respect to")
    from ..differentiate import gradient

    head = placeholder(output.shape, output.dtype, f"{output.name}.head")
    split = SplitVJP(ins, [output], [head], list(gradient(output, wrt, head)), target,
                     options)
    expected, head_spec = input_specs(ins), input_specs([head])
    pair = object()  # the identity a Saved is checked against
    # (the cuda target takes its torch tensors as they are)
    coerce_in = getattr(split.forward_program, "coerce", coerce_input)
    coerce_head = getattr(split.backward_program, "coerce", coerce_input)

    def forward(*arrays):
        (value,), values = split.forward(checked_feed(expected, arrays, coerce_in))
        return value, Saved(pair, values)

    def backward(saved, head_array):
        if not isinstance(saved, Saved) or saved._pair is not pair:
            raise TypeError("backward: saved must be what this pair's forward returned, got "
                            f"{type(saved).__name__}")
        return split.backward(saved._values,
                              [checked_feed(head_spec, (head_array,), coerce_head)[head]])

    forward.program, backward.program = split.forward_program, split.backward_program
    forward.target = backward.target = split.target
    forward.inputs, forward.output = ins, output
    backward.wrt, backward.head, backward.saved_tensors = wrt, head, split.saved_tensors
    return forward, backward
