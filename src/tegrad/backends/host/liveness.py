"""Which tensors a program may drop after each kernel."""

from __future__ import annotations

from ...lower.kernels import Plan, reads_and_makes


def dead_after(plan: Plan, free_unread: bool = True) -> list[list]:
    """Per kernel, the computed tensors whose last reader it is, or that it makes and
    nothing reads (a scan's history of a state no later kernel reads: an LSTM's cells);
    outputs are kept. The peak memory of a program is then what is live at once, not
    everything it made, and the compiled target's pool gets each buffer back for the next
    run (an array made anew costs a page fault per 4 KiB it writes). ``free_unread``
    (``Options.free_unread``) False: only what a later kernel reads is dropped."""
    made, last = set(), {}
    for k, kernel in enumerate(plan.kernels):
        reads, makes = reads_and_makes(kernel)
        made.update(makes)
        for t in reads:
            last[t] = k
        if free_unread:
            for t in makes:
                last.setdefault(t, k)
    keep = set(plan.outputs)
    dead: list[list] = [[] for _ in plan.kernels]
    for t, k in last.items():
        if t in made and t not in keep:
            dead[k].append(t)
    return dead
