"""Nodes are interned weakly: expressions nobody uses any more are freed."""

from __future__ import annotations

import gc

import numpy as np

import tegrad as tg
from tegrad.ir import expr


def build_and_run_a_gradient():
    x = tg.placeholder((3, 8), "float64", name="X")
    k = tg.reduce_axis(8, "k")
    m = tg.compute((3,), lambda i: tg.max(tg.exp(x[i, k]) * 2.0, k), name="M")
    head = tg.placeholder((3,), "float64", name="H")
    (g,) = tg.gradient(m, [x], head)
    tg.build([x, head], g)(np.ones((3, 8)), np.ones(3))


def test_interned_nodes_are_released():
    build_and_run_a_gradient()
    gc.collect()
    before = len(expr._INTERN)
    for _ in range(20):
        build_and_run_a_gradient()
    gc.collect()
    assert len(expr._INTERN) <= before + 5


def test_interning_still_shares_live_nodes():
    x = tg.placeholder((4,), name="X")
    i = tg.reduce_axis(4, "i")
    assert x[i] + 1.0 is x[i] + 1.0
