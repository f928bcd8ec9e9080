"""Scatter kernels (placeholder until the matcher lands)."""


def match_scatter(t):
    return None
