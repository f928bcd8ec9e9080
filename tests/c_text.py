"""The C the cpu target generates for the op table and every ``tg.nn`` coverage case
(forward and gradients, float64 and float32), one sha256 per case.

``tests/data/c_text.json`` holds the hashes of the text as it was before issue 28 moved
the loop-nest decisions out of the C code generator; ``test_c_text.py`` checks the text is
unchanged. A change that means to alter the generated C writes the file again:

    python tests/c_text.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import tegrad as tg

GOLDEN = Path(__file__).parent / "data" / "c_text.json"


def c_text(outputs) -> str:
    """Every general kernel's C for ``outputs`` (the scans' step kernels included)."""
    from tegrad.backends.cpu.program import blueprint
    from tegrad.lower.plan import plan

    return "\n\n".join(k.text for k in blueprint(plan(list(outputs), fused=True)).texts())


def programs():
    """``(name, outputs)`` for each op-table spec and coverage case."""
    sys.path.insert(0, str(Path(__file__).parent))
    from optable import SPECS
    from tegrad.coverage.agreement import trace
    from tegrad.coverage.cases import CASES

    for spec in SPECS:
        inputs, out = spec.build()
        head = tg.placeholder(out.shape, out.dtype, name="H")
        diff = [inputs[k] for k in spec.diff]
        yield f"optable/{spec.name}", [out, *tg.gradient(out, diff, head=head)]
    for case in CASES:
        arrays = case.inputs(np.random.default_rng(0))
        for dtype in ("float64", "float32"):
            graph = trace(case, arrays, dtype)
            yield f"nn/{case.name}/{dtype}", [*graph.outputs, *graph.grads]


def hashes() -> dict[str, str]:
    return {name: hashlib.sha256(c_text(outs).encode()).hexdigest()
            for name, outs in programs()}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    GOLDEN.write_text(json.dumps(hashes(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
