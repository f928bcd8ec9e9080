"""``GradCheckReport``: what the checker found, per input, in words and arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


@dataclass
class Check:
    """One check on one input: what it compared, its verdict and margin."""

    name: str
    verdict: str
    margin: float  # largest error / allowed error (< 1 passes)
    detail: str = ""


@dataclass
class Kink:
    coords: tuple[int, ...]
    lo: float  # one-sided derivatives, projected on the head
    hi: float
    received: float


@dataclass
class InputResult:
    """The verdict for one input's gradient.

    ``wrong_mask`` is shaped like the input (True where its gradient is wrong), or None
    where no element-wise comparison ran. ``detectable`` is the smallest error of a
    single gradient element (or Jacobian entry, where the full Jacobian was compared: see
    ``detectable_unit``) that the checks run would have caught, at every position.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    verdict: str = PASS
    margin: float = 0.0
    max_error: float = 0.0
    detectable: float = float("nan")
    detectable_unit: str = "gradient element"
    wrong_mask: np.ndarray | None = None
    region: str = ""
    ascii: str = ""
    signature: str = ""
    condition: str = ""
    worst: list[tuple] = field(default_factory=list)
    kinks: list[Kink] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    linear: bool = False
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        kind = "linear in it" if self.linear else "nonlinear in it"
        out = [
            f"{self.name} {self.shape} {self.dtype} (forward {kind}): {self.verdict}, "
            f"margin {self.margin:.3g} (error / allowed), max error {self.max_error:.3g}, "
            f"detects any error >= {self.detectable:.2g} in a single {self.detectable_unit}"
        ]
        for c in self.checks:
            out.append(f"  {c.name}: {c.verdict}, margin {c.margin:.3g}"
                       + (f" ({c.detail})" if c.detail else ""))
        if self.verdict == FAIL:
            out.append(f"  wrong elements: {self.region}")
            if self.signature:
                out.append(f"  signature: {self.signature}")
            if self.condition:
                out.append(f"  in the backward: {self.condition}")
            out.append("  worst elements (index: expected, received, allowed error):")
            for coords, e, g, t in self.worst:
                out.append(f"    {coords}: {e:.8g}, {g:.8g}, {t:.2g}")
            if self.ascii:
                out.append("  wrong elements over the last two axes ('#' wrong, 'k' kink):")
                out.extend("    " + row for row in self.ascii.splitlines())
        if self.kinks:
            shown = ", ".join(
                f"{k.coords} [{k.lo:.4g}, {k.hi:.4g}] got {k.received:.4g}" for k in self.kinks[:4]
            )
            more = f" and {len(self.kinks) - 4} more" if len(self.kinks) > 4 else ""
            out.append(f"  kinks met ({len(self.kinks)}; any value in [d-, d+] accepted): "
                       f"{shown}{more}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out


@dataclass
class GradCheckReport:
    """``results[name]`` per input; ``passed`` when none failed."""

    results: dict[str, InputResult]
    seed: int
    forward_evals: int
    backward_evals: int
    seconds: float
    subject: str = ""

    @property
    def passed(self) -> bool:
        return all(r.verdict != FAIL for r in self.results.values())

    @property
    def verdict(self) -> str:
        verdicts = {r.verdict for r in self.results.values()}
        for v in (FAIL, INCONCLUSIVE):
            if v in verdicts:
                return v
        return PASS

    def summary(self) -> str:
        head = (f"gradient check{' of ' + self.subject if self.subject else ''}: "
                f"{self.verdict} (seed {self.seed}, {self.forward_evals} forward and "
                f"{self.backward_evals} backward evaluations, {self.seconds:.3g} s)")
        lines = [head]
        for r in self.results.values():
            lines.extend(r.lines())
        return "\n".join(lines)

    __str__ = summary
