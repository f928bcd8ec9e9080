"""The generated C is unchanged on the op table and the coverage cases (``c_text.py``)."""

from __future__ import annotations

import hashlib
import json

import pytest

from c_text import GOLDEN, c_text, programs

PROGRAMS = list(programs())
EXPECTED = json.loads(GOLDEN.read_text())


def test_every_case_has_a_stored_text():
    assert {name for name, _ in PROGRAMS} == set(EXPECTED)


@pytest.mark.parametrize("name, outputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_generated_c_is_unchanged(name, outputs):
    got = hashlib.sha256(c_text(outputs).encode()).hexdigest()
    assert got == EXPECTED[name], f"{name}: the generated C changed (tests/c_text.py --write)"
