"""Self-test of the gradient bug zoo (tests/gradzoo.py): every case builds, deterministically
and with fresh placeholders; correct backwards agree with PyTorch float64 autograd (or, at
kinks, are valid subgradients); planted bugs are wrong exactly where ``expected_wrong`` says,
for heads other than the ones the masks were computed with."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tegrad as tg
from gradzoo import (
    F32,
    KINDS,
    KINK_FAMILIES,
    ZOO,
    ZOO_BY_NAME,
    ZooCase,
    ZooPair,
    evaluate_grads,
    f32_wrong,
    f64_wrong,
    placeholders_of,
    random_head,
    reference_grads,
)

BUGGY = [c for c in ZOO if c.bug is not None]
CORRECT = [c for c in ZOO if c.bug is None]
CHECK_HEAD_SEEDS = (11, 12)  # not the seeds expected_wrong was computed with
EXACT_KINDS = ("constant scale", "sign flip", "shifted index")  # checkable element-wise
SIGNED = [c for c in BUGGY if c.kind in EXACT_KINDS]


def _ids(cases: list[ZooCase]) -> list[str]:
    return [c.name for c in cases]


def _correct_counterpart(case: ZooCase) -> ZooCase:
    return next(c for c in CORRECT if c.family == case.family)


# ---------------------------------------------------------------------------- the table


def test_table_covers_the_brief():
    assert len(BUGGY) >= 15
    assert len({c.name for c in ZOO}) == len(ZOO)
    for case in BUGGY:
        assert case.kind is None or case.kind in KINDS, case
        assert any(c.family == case.family for c in CORRECT), f"{case.name}: no correct version"
        assert case.bug.strip()
    for case in CORRECT:
        assert case.kind is None
        assert case.name.split(".")[1].startswith("correct")
    assert {c.dtype for c in ZOO} == {"float64", F32}
    assert KINK_FAMILIES <= {c.family for c in ZOO}


@pytest.mark.parametrize("case", ZOO, ids=_ids(ZOO))
def test_case_builds_fresh_and_deterministic(case: ZooCase):
    p1, p2 = case.make(), case.make()
    _check_shapes(case, p1)
    ids1 = {id(t) for t in placeholders_of([p1.output, *p1.grads])}
    ids2 = {id(t) for t in placeholders_of([p2.output, *p2.grads])}
    assert not ids1 & ids2, "make() must build new placeholders"
    assert p1.values.keys() == p2.values.keys()
    for name, v in p1.values.items():
        assert v.dtype == p2.values[name].dtype
        np.testing.assert_array_equal(v, p2.values[name])
    assert p1.expected_wrong.keys() == p2.expected_wrong.keys()
    for name, m in p1.expected_wrong.items():
        np.testing.assert_array_equal(m, p2.expected_wrong[name])


def _check_shapes(case: ZooCase, pair: ZooPair) -> None:
    assert len(pair.inputs) == len(pair.grads) > 0
    for x, g in zip(pair.inputs, pair.grads, strict=True):
        assert isinstance(x, tg.Placeholder)
        assert x.dtype == case.dtype and g.dtype == case.dtype, (x, g)
        assert g.shape == x.shape
    assert isinstance(pair.head, tg.Placeholder)
    assert pair.head.shape == pair.output.shape and pair.head.dtype == pair.output.dtype
    read = [p for p in placeholders_of([pair.output, *pair.grads]) if p is not pair.head]
    assert len({p.name for p in read}) == len(read), "placeholder names must be unique"
    assert {p.name for p in read} == set(pair.values), "values: exactly the placeholders read"
    assert pair.head.name not in pair.values
    for p in read:
        v = pair.values[p.name]
        assert v.shape == p.shape and v.dtype == np.dtype(p.dtype), p.name
    if case.bug is None:
        assert pair.expected_wrong == {}
    else:
        assert set(pair.expected_wrong) == {x.name for x in pair.inputs}
        for x in pair.inputs:
            mask = pair.expected_wrong[x.name]
            assert mask.dtype == bool and mask.shape == x.shape


# ---------------------------------------------------------------------------- correct versions

SMOOTH_CORRECT = [c for c in CORRECT if c.family not in KINK_FAMILIES]
KINK_CORRECT = [c for c in CORRECT if c.family in KINK_FAMILIES]


@pytest.mark.parametrize("case", SMOOTH_CORRECT, ids=_ids(SMOOTH_CORRECT))
def test_correct_matches_torch(case: ZooCase):
    pair = case.make()
    for seed in CHECK_HEAD_SEEDS:
        head = random_head(pair, seed)
        ref = reference_grads(case, pair.values, head)
        for x, g in zip(pair.inputs, evaluate_grads(pair, head), strict=True):
            r = ref[x.name]
            if case.dtype == F32:  # float32 rounding only: ~1e-7 of the scale
                assert np.abs(g - r).max() <= 1e-5 * np.abs(r).max(), x.name
            else:
                assert not f64_wrong(g, r).any(), x.name


def _windows(a: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H/2, W/2, 4): the 2x2 windows, row-major inside."""
    n, c, h, w = a.shape
    return a.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, h // 2, w // 2, 4)


@pytest.mark.parametrize("case", KINK_CORRECT, ids=_ids(KINK_CORRECT))
def test_correct_at_kinks_is_a_subgradient(case: ZooCase):
    pair = case.make()
    x = pair.values["X"]
    for seed in CHECK_HEAD_SEEDS:
        head = random_head(pair, seed)
        (g,) = evaluate_grads(pair, head)
        if case.family == "max_pool2x2_ties":
            # g = head * lam per window, lam >= 0 on the maxima only, sum lam = 1
            xw, gw = _windows(x), _windows(g)
            ismax = xw == xw.max(-1, keepdims=True)
            assert (ismax.sum(-1) > 1).any(), "the data must have ties"
            lam = gw / head[..., None]
            assert np.all(lam >= -1e-12) and np.all(np.abs(lam[~ismax]) <= 1e-12)
            np.testing.assert_allclose(lam.sum(-1), 1.0, rtol=0, atol=1e-12)
        else:  # relu: at x == 0 the gradient is lam * head with lam in [0, 1]
            zero = x == 0.0
            assert zero.any(), "the data must have exact zeros"
            lam = g[zero] / head[zero]
            assert np.all((lam >= -1e-12) & (lam <= 1 + 1e-12))
            ref = reference_grads(case, pair.values, head)["X"]
            assert not f64_wrong(g[~zero], ref[~zero]).any()


@pytest.mark.parametrize("family", sorted(KINK_FAMILIES))
def test_kink_variants_differ(family: str):
    """The correct variants at kinks are genuinely different backwards."""
    cases = [c for c in KINK_CORRECT if c.family == family]
    assert len(cases) >= 2
    grads = []
    for case in cases:
        pair = case.make()
        grads.append(evaluate_grads(pair, random_head(pair, CHECK_HEAD_SEEDS[0]))[0])
    for a, b in itertools.combinations(grads, 2):
        assert not np.allclose(a, b)


# ---------------------------------------------------------------------------- planted bugs


def _masks_for_head(case: ZooCase, pair: ZooPair, head: np.ndarray) -> dict[str, np.ndarray]:
    ref = reference_grads(case, pair.values, head)
    got = evaluate_grads(pair, head)
    if case.dtype == F32:
        good = evaluate_grads(_correct_counterpart(case).make(), head)
        return {x.name: f32_wrong(g, c, ref[x.name])
                for x, g, c in zip(pair.inputs, got, good, strict=True)}
    return {x.name: f64_wrong(g, ref[x.name]) for x, g in zip(pair.inputs, got, strict=True)}


@pytest.mark.parametrize("case", BUGGY, ids=_ids(BUGGY))
def test_bug_is_wrong_exactly_on_its_mask(case: ZooCase):
    pair = case.make()
    assert any(m.any() for m in pair.expected_wrong.values()), "the bug must show"
    for seed in CHECK_HEAD_SEEDS:
        masks = _masks_for_head(case, pair, random_head(pair, seed))
        for name, mask in masks.items():
            np.testing.assert_array_equal(mask, pair.expected_wrong[name], err_msg=name)


@pytest.mark.parametrize("case", [c for c in BUGGY if c.dtype == F32],
                         ids=_ids([c for c in BUGGY if c.dtype == F32]))
def test_float32_bug_is_large(case: ZooCase):
    """Wrong elements are off by > 1e-2 relative; the correct float32 kernel is within 1e-5."""
    pair, good = case.make(), _correct_counterpart(case).make()
    for seed in CHECK_HEAD_SEEDS:
        head = random_head(pair, seed)
        ref = reference_grads(case, pair.values, head)
        bad, fine = evaluate_grads(pair, head), evaluate_grads(good, head)
        for x, b, f in zip(pair.inputs, bad, fine, strict=True):
            r, mask = ref[x.name], pair.expected_wrong[x.name]
            assert np.abs(f - r).max() <= 1e-5 * np.abs(r).max()
            assert np.all(np.abs(b - r)[mask] > 1e-2 * np.abs(r)[mask])


def _offsets(ndim: int):
    return [d for d in itertools.product((-1, 0, 1), repeat=ndim) if any(d)]


@pytest.mark.parametrize("case", SIGNED, ids=_ids(SIGNED))
def test_kind_signature(case: ZooCase):
    """The exactly checkable kinds: constant scale, sign flip, shifted index."""
    pair = case.make()
    head = random_head(pair, CHECK_HEAD_SEEDS[0])
    ref = reference_grads(case, pair.values, head)
    for x, g in zip(pair.inputs, evaluate_grads(pair, head), strict=True):
        mask, r = pair.expected_wrong[x.name], ref[x.name]
        if not mask.any():
            continue
        if case.kind == "sign flip":
            np.testing.assert_allclose(g[mask], -r[mask], rtol=1e-12)
        elif case.kind == "constant scale":
            ratio = g[mask] / r[mask]
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
            assert abs(ratio[0]) not in (0.0, 1.0)
        else:  # shifted index: g[i] = r[i + d] wherever i + d lies inside
            assert any(_shift_matches(g, r, mask, d) for d in _offsets(g.ndim))


def _shift_matches(g: np.ndarray, r: np.ndarray, mask: np.ndarray, d: tuple[int, ...]) -> bool:
    idx = np.argwhere(mask)
    tgt = idx + np.array(d)
    inside = np.all((tgt >= 0) & (tgt < np.array(g.shape)), axis=1)
    if inside.mean() < 0.5:
        return False
    got = g[tuple(idx[inside].T)]
    want = r[tuple(tgt[inside].T)]
    return bool(np.allclose(got, want, rtol=1e-9, atol=1e-12))


def test_mask_sizes_are_what_the_bugs_imply():
    """Spot checks of masks whose extent follows from the bug by hand."""
    def wrong(name: str) -> dict[str, int]:
        return {k: int(m.sum()) for k, m in ZOO_BY_NAME[name].make().expected_wrong.items()}

    assert wrong("conv2d_s2p1.one_element_1pct") == {"X": 1, "W": 0}
    assert wrong("conv2d_s2p1.halved_corner") == {"X": 2 * 3, "W": 0}
    assert wrong("conv2d_s2p1.drop_last_rowcol") == {"X": 2 * 3 * 17, "W": 0}
    assert wrong("conv2d_s2p1.transposed_weight") == {"X": 0, "W": 6 * 9}  # o != c
    assert wrong("embedding_repeated.drop_repeated") == {"W": 2 * 4}  # rows 1 and 3
    assert wrong("cumsum.ignores_mask") == {"X": 3 * 4}  # every k > 0
    assert wrong("squared_error.sign_flip_target") == {"X": 0, "T": 20}
