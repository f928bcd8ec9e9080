"""The coverage report's timing inputs (``tegrad.coverage.scaling``): every case is timed
at a size where its time is not all call overhead, on values its own test generator made
(tiled, jittered, progressions lengthened), and the timing checks its results against
torch so that a scaling that changed what a case computes shows."""

from __future__ import annotations

import numpy as np
import pytest

from tegrad.coverage import CASES
from tegrad.coverage.cases import Case, distinct, integers, join, normal
from tegrad.coverage.scaling import (
    ELEMENTS,
    JITTER,
    Scaling,
    derive,
    find_groups,
    grow,
    largest_factor,
    progression_step,
)

pytest.importorskip("torch", reason="PyTorch is the reference of every case")

# every size of these is fixed by their kwargs or by being 0-d: their time is overhead
# by construction, and they are timed on their test inputs
FIXED = {"smooth_l1_loss[beta 0.5, 0-d]": "0-d inputs",
         "reshape[size-1 axes]": "the target shape (3, 2, 4, 1)",
         "view": "the sizes 6, 4", "broadcast_to": "the size (2, 3, 4)"}
SMALLEST = 1 << 15  # inputs' elements of a scaled case, at least


def _differentiable(case: Case) -> bool:
    return bool(case.differentiable(case.inputs(np.random.default_rng(0))))


@pytest.mark.parametrize("case", [c for c in CASES if c.bench is None and _differentiable(c)],
                         ids=lambda c: c.name)
def test_every_differentiable_case_gets_timing_inputs(case):
    scaling = derive(case)
    if case.name in FIXED:
        assert scaling is None, f"{case.name} scales now: take it out of FIXED"
        return
    assert scaling is not None and scaling.factor >= 2, case.name
    arrays = case.inputs(np.random.default_rng(0))
    grown = scaling.arrays(arrays, np.random.default_rng(1))
    elements = sum(a.size for a in grown)
    assert SMALLEST <= elements <= ELEMENTS, (case.name, scaling.describe(arrays))
    assert [a.dtype for a in grown] == [a.dtype for a in arrays]


def test_the_fixed_cases_are_in_the_table():
    assert set(FIXED) <= {c.name for c in CASES}


def _case(op: str, inputs, **options) -> Case:
    return Case(op, "", "convolution", inputs, **options)


def test_a_convolution_scales_batch_channels_and_image_but_not_its_kernel():
    case = _case("conv2d", normal((2, 3, 6, 5), (4, 3, 3, 3), (4,)), kwargs=dict(padding=1))
    arrays = case.inputs(np.random.default_rng(0))
    groups = find_groups(case, arrays, np.random.default_rng(0))
    assert groups == (((0, 0),), ((0, 1), (1, 1)), ((0, 2),), ((0, 3),))
    shapes = Scaling(groups, 4).shapes(arrays)
    assert shapes == [(8, 12, 24, 20), (4, 12, 3, 3), (4,)]


def test_a_loss_scales_its_targets_with_its_rows():
    case = Case("cross_entropy", "", "loss", join(normal((4, 5)), integers((4,), 5)))
    arrays = case.inputs(np.random.default_rng(0))
    groups = find_groups(case, arrays, np.random.default_rng(0))
    assert groups[0] == ((0, 0), (1, 0))  # rows and targets together
    scaling = derive(case)
    grown = scaling.arrays(arrays, np.random.default_rng(0))
    assert grown[1].dtype == np.int64 and 0 <= grown[1].min() and grown[1].max() < 5


def test_a_group_that_only_an_even_factor_allows_is_refused():
    """Depthwise with multiplier 2: 2 channels and a weight of 4 rows; 4 channels (x2)
    happen to work (multiplier 1), 6 (x3) do not, so the channels stay."""
    case = Case("depthwise_conv2d", "", "convolution", normal((1, 2, 9, 8), (4, 1, 3, 2)),
                ref=lambda x, w: __import__("torch").nn.functional.conv2d(x, w, groups=2))
    arrays = case.inputs(np.random.default_rng(0))
    groups = find_groups(case, arrays, np.random.default_rng(0))
    assert ((0, 1),) not in groups and ((0, 2),) in groups and ((0, 3),) in groups


def test_size_one_axes_are_never_scaled():
    case = Case("relu", "", "activation", normal((1, 7, 1)))
    scaling = derive(case)
    assert scaling.groups == (((0, 1),),)


@pytest.mark.parametrize("limit", [1, 5, 6, 64, 1000, 1 << 14])
def test_largest_factor_finds_the_last_that_fits(limit):
    calls = []

    def fits(f):
        calls.append(f)
        return f <= limit
    assert largest_factor(fits) == limit
    assert len(calls) <= 2 * 15  # doubling, then halving the gap


def test_grown_integers_and_masks_are_tiles_of_the_test_values():
    rng = np.random.default_rng(0)
    ids = np.array([[3, -100], [0, 4]])
    mask = np.array([[True, False, True]])
    np.testing.assert_array_equal(grow(ids, (2, 3), rng), np.tile(ids, (2, 3)))
    np.testing.assert_array_equal(grow(mask, (4, 1), rng), np.tile(mask, (4, 1)))
    whole = np.array([-1.0, 1.0, 1.0])  # signs as floats: kept exactly
    np.testing.assert_array_equal(grow(whole, (5,), rng), np.tile(whole, 5))


def test_grown_floats_keep_signs_zeros_and_ranges_and_rarely_tie():
    rng = np.random.default_rng(0)
    x = np.array([[0.25, -1.5, 0.0], [2.0, -0.75, 0.5]])
    y = grow(x, (3, 50), rng)
    np.testing.assert_array_equal(y[:2, :3], x)  # the first copy is the test input
    tiled = np.tile(x, (3, 50))
    assert np.array_equal(np.sign(y), np.sign(tiled))
    assert np.all(np.abs(y - tiled) <= JITTER * np.abs(tiled) + 1e-15)
    nonzero = y[tiled != 0]
    assert np.unique(nonzero).size == nonzero.size  # copies of a value differ (float64)
    # in float32, 150 jittered copies of a value meet in about one pair in a hundred: the
    # ops for which a tie matters (max, pools, sorts) take progressions (next test)
    single = nonzero.astype(np.float32)
    assert np.unique(single).size >= 0.98 * single.size


def test_progressions_grow_as_longer_progressions_without_ties():
    x = distinct((3, 4))(np.random.default_rng(0))[0]
    step = progression_step(x)
    assert step == pytest.approx(0.1)
    assert progression_step(np.array([0.0, 0.1, 0.3])) is None
    y = grow(x, (100, 30), np.random.default_rng(0))
    assert y.shape == (300, 120)
    assert progression_step(y) == pytest.approx(step)
    assert np.unique(y.astype(np.float32)).size == y.size  # distinct in float32 too
    residues = np.round(np.mod(y - x.min(), step) / step) % 1  # same values modulo step
    assert np.all(residues == 0)


def test_a_timing_whose_results_differ_from_torch_says_so():
    """A scaling (or a bench) that changes what the case computes shows in the report: the
    timing's check against torch is recorded, and the cell says the result differs."""
    from tegrad.coverage.render import timed_on
    from tegrad.coverage.run import Row
    from tegrad.coverage.timing import time_case

    good = Case("mul", "", "arithmetic", normal((3, 4)), fn=lambda a: a * 2.0,
                ref=lambda a: a * 2.0)
    wrong = Case("mul", "off", "arithmetic", normal((3, 4)), fn=lambda a: a * 2.0,
                 ref=lambda a: a * 2.5)
    timing = time_case(good, repeats=1)
    assert timing.inputs.startswith("test x") and timing.checked
    off = time_case(wrong, repeats=1)
    assert not off.checked and off.check_error > 0.1
    row = Row(wrong, timing=off)
    assert "f32 result differs" in timed_on(row) and timed_on(Row(good, timing=timing)) == \
        timing.inputs


def test_scaled_inputs_that_raise_fall_back_to_the_test_inputs(monkeypatch):
    """A scaling whose shapes the check let through but a side refuses (here one made up:
    a 3-row case grown to 12 rows that the op refuses) times the test inputs and says
    why, instead of failing the case."""
    from tegrad.coverage import timing

    def at_most_three_rows(a):
        if a.shape[0] > 3:
            raise ValueError("at most 3 rows")
        return a * 2.0

    case = Case("mul", "rows", "arithmetic", normal((3, 4)), fn=at_most_three_rows,
                ref=lambda a: a * 2.0)
    monkeypatch.setattr(timing, "derive", lambda case, seed=0: Scaling((((0, 0),),), 4))
    found = timing.time_case(case, repeats=1)
    assert found.inputs == "test (test x4 raised ValueError: at most 3 rows)"
    assert found.checked and found.both_ratio > 0
