"""The simplifier's entry points (placeholder)."""

from __future__ import annotations


def simplify_compute(t):
    return t


def simplify(t):
    return t
