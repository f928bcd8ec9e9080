"""Cases: ``tg.nn`` pooling (max, avg, lp, adaptive, global) against torch.

Max pools take ``distinct`` inputs (tegrad splits a tied maximum's gradient evenly,
torch gives it to one; ``distinct`` values also have distinct ``|x|`` away from 0, for
lp pools of infinite order), lp pools positive ones. Every index map is affine (``//`` for
adaptive bins), so every case asserts gather form but one whose stride and dilation are
coprime (a documented limit of the core's scatter-to-gather).
"""

from __future__ import annotations

from ..cases import case, distinct, normal, uniform

BENCH = (8, 64, 56, 56)


def pooling(op, label, inputs, **options):
    return case(op, label, inputs, category="pooling", **options)


def _global_avg(x):
    return x.mean(dim=(-2, -1), keepdim=True)


def _global_max(x):
    return x.amax(dim=(-2, -1), keepdim=True)


# ---------------------------------------------------------------------------- max


pooling("max_pool1d", "k3 s2 p1", distinct((2, 3, 11)),
        kwargs=dict(kernel_size=3, stride=2, padding=1))
pooling("max_pool1d", "dilation 2, ceil_mode", distinct((2, 3, 10)),
        kwargs=dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True))
pooling("max_pool1d", "return_indices", distinct((2, 3, 9)),
        kwargs=dict(kernel_size=2, stride=2, padding=1, return_indices=True))
pooling("max_pool2d", "3x3 s2", distinct((2, 3, 7, 7)), kwargs=dict(kernel_size=3, stride=2),
        bench=normal(BENCH))
pooling("max_pool2d", "2x2", distinct((2, 3, 6, 8)), kwargs=dict(kernel_size=2),
        bench=normal(BENCH))
pooling("max_pool2d", "stride > kernel", distinct((1, 2, 9, 8)),
        kwargs=dict(kernel_size=2, stride=3))
pooling("max_pool2d", "pad 1, dilation 2", distinct((2, 2, 7, 8)),
        kwargs=dict(kernel_size=3, padding=1, dilation=2, stride=1))
pooling("max_pool2d", "ceil_mode partial window", distinct((2, 2, 8, 7)),
        kwargs=dict(kernel_size=3, stride=2, padding=1, ceil_mode=True))
pooling("max_pool2d", "return_indices, pad", distinct((2, 2, 7, 6)),
        kwargs=dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True))
pooling("max_pool2d", "size-1 dim, kernel (1, 2)", distinct((1, 2, 1, 5)),
        kwargs=dict(kernel_size=(1, 2), stride=1))
pooling("max_pool2d", "unbatched", distinct((3, 5, 5)), kwargs=dict(kernel_size=2, stride=1))
pooling("max_pool3d", "k2 s2 p1", distinct((1, 2, 5, 6, 7)),
        kwargs=dict(kernel_size=2, stride=2, padding=1))
pooling("max_pool3d", "dilation, ceil_mode, indices", distinct((1, 2, 5, 6, 7)),
        kwargs=dict(kernel_size=(2, 3, 2), stride=(2, 2, 2), dilation=(1, 2, 2),
                    ceil_mode=True, return_indices=True))
# core limit (simplify/gather.py, "Limits"): window reads 3 o + 2 r = i have coprime
# coefficients with no unit one, which the core leaves as a scatter-add
pooling("max_pool1d", "stride 3, dilation 2", distinct((2, 2, 12)),
        kwargs=dict(kernel_size=2, stride=3, dilation=2), gather_form=None)

# ---------------------------------------------------------------------------- avg


pooling("avg_pool1d", "k3 s2 p1, exclude pad", normal((2, 3, 10)),
        kwargs=dict(kernel_size=3, stride=2, padding=1, count_include_pad=False))
pooling("avg_pool1d", "ceil_mode, include pad", normal((2, 3, 10)),
        kwargs=dict(kernel_size=3, stride=2, padding=1, ceil_mode=True))
pooling("avg_pool2d", "3x3 s2", normal((2, 3, 7, 7)), kwargs=dict(kernel_size=3, stride=2),
        bench=normal(BENCH))
pooling("avg_pool2d", "2x2", normal((2, 3, 6, 8)), kwargs=dict(kernel_size=2),
        bench=normal(BENCH))
pooling("avg_pool2d", "stride > kernel", normal((1, 2, 9, 8)),
        kwargs=dict(kernel_size=2, stride=3))
for include in (True, False):
    pooling("avg_pool2d", f"pad 1, ceil_mode, count_include_pad={include}",
            normal((2, 2, 8, 7)), kwargs=dict(kernel_size=3, stride=2, padding=1,
                                               ceil_mode=True, count_include_pad=include))
pooling("avg_pool2d", "divisor_override", normal((2, 2, 7, 7)),
        kwargs=dict(kernel_size=(3, 2), stride=2, padding=1, divisor_override=5))
pooling("avg_pool2d", "size-1 dim, odd sizes", normal((1, 3, 1, 7)),
        kwargs=dict(kernel_size=(1, 3), stride=(1, 2), padding=(0, 1), count_include_pad=False))
pooling("avg_pool3d", "k3 s2 p1, ceil_mode, exclude pad", normal((1, 2, 5, 6, 7)),
        kwargs=dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                    count_include_pad=False))
pooling("avg_pool3d", "divisor_override", normal((1, 2, 4, 5, 6)),
        kwargs=dict(kernel_size=2, divisor_override=3))

# ---------------------------------------------------------------------------- lp


pooling("lp_pool1d", "p2 k3 s2", uniform((2, 3, 11)),
        kwargs=dict(norm_type=2, kernel_size=3, stride=2))
pooling("lp_pool2d", "p3, ceil_mode partial window", uniform((2, 2, 7, 8)),
        kwargs=dict(norm_type=3, kernel_size=(2, 3), stride=2, ceil_mode=True))
pooling("lp_pool2d", "p1.5, stride > kernel", uniform((1, 2, 9, 8)),
        kwargs=dict(norm_type=1.5, kernel_size=2, stride=3))
pooling("lp_pool2d", "p inf (max of |x|)", distinct((2, 2, 6, 7)),
        kwargs=dict(norm_type=float("inf"), kernel_size=2, ceil_mode=True))
pooling("lp_pool1d", "p -inf (min of |x|)", distinct((2, 2, 9)),
        kwargs=dict(norm_type=float("-inf"), kernel_size=3, stride=2))
pooling("lp_pool3d", "p2 k2", uniform((1, 2, 4, 5, 6)), kwargs=dict(norm_type=2, kernel_size=2))

# ---------------------------------------------------------------------------- adaptive


for size, out in ((7, 3), (5, 5), (4, 1), (10, 4)):
    pooling("adaptive_avg_pool1d", f"{size} -> {out}", normal((2, 3, size)),
            kwargs=dict(output_size=out))
    pooling("adaptive_max_pool1d", f"{size} -> {out}", distinct((2, 3, size)),
            kwargs=dict(output_size=out))
pooling("adaptive_max_pool1d", "return_indices", distinct((2, 3, 7)),
        kwargs=dict(output_size=3, return_indices=True))
pooling("adaptive_avg_pool2d", "(7, 9) -> (3, 4)", normal((2, 3, 7, 9)),
        kwargs=dict(output_size=(3, 4)))
pooling("adaptive_avg_pool2d", "(6, 5) -> (None, 2)", normal((2, 3, 6, 5)),
        kwargs=dict(output_size=(None, 2)))
pooling("adaptive_avg_pool2d", "14 -> 7", normal((1, 2, 14, 14)), kwargs=dict(output_size=7),
        bench=normal(BENCH))
pooling("adaptive_avg_pool2d", "11 -> 5", normal((1, 2, 11, 11)), kwargs=dict(output_size=5),
        bench=normal(BENCH))
pooling("adaptive_avg_pool3d", "(5, 6, 7) -> (2, None, 3)", normal((1, 2, 5, 6, 7)),
        kwargs=dict(output_size=(2, None, 3)))
pooling("adaptive_max_pool2d", "(7, 9) -> (3, None)", distinct((2, 3, 7, 9)),
        kwargs=dict(output_size=(3, None)))
pooling("adaptive_max_pool2d", "return_indices, (7, 5) -> (4, 3)", distinct((2, 2, 7, 5)),
        kwargs=dict(output_size=(4, 3), return_indices=True))
pooling("adaptive_max_pool2d", "11 -> 5", distinct((1, 2, 11, 11)), kwargs=dict(output_size=5),
        bench=normal(BENCH))
pooling("adaptive_max_pool3d", "(5, 6, 7) -> (2, 4, None)", distinct((1, 2, 5, 6, 7)),
        kwargs=dict(output_size=(2, 4, None)))

# ---------------------------------------------------------------------------- global


pooling("global_avg_pool2d", "", normal((2, 3, 5, 7)), ref=_global_avg, bench=normal(BENCH))
pooling("global_max_pool2d", "", distinct((2, 3, 5, 7)), ref=_global_max, bench=normal(BENCH))
