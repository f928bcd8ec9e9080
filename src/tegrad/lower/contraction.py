"""Contractions (placeholder until the strided-view matcher lands)."""


def match_contraction(t):
    return None
