"""Packaging as a library declares it: ranges in pyproject.toml, the tested set pinned in
constraints.txt, and a wheel that builds without setuptools' warnings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
Requirement = pytest.importorskip("packaging.requirements").Requirement

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _declared() -> list[Requirement]:
    """Every requirement of the core and of the extras, less the extras' references to
    tegrad's own extras (``tegrad[cli,torch]``)."""
    project = _project()
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    return [r for r in map(Requirement, texts) if r.name != "tegrad"]


def _pinned() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("requirement", _declared(), ids=str)
def test_a_declared_requirement_is_a_range_not_a_pin(requirement):
    operators = {spec.operator for spec in requirement.specifier}
    assert "==" not in operators and "===" not in operators, (
        f"{requirement}: pins belong in constraints.txt; a user's install needs a range")
    assert ">=" in operators and "<" in operators, (
        f"{requirement}: give the oldest tested release and the next major as bounds")


def test_the_tested_set_pins_every_declared_package_within_its_range():
    pins = _pinned()
    for requirement in _declared():
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"constraints.txt does not pin {requirement.name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {requirement}")


def test_the_makefile_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install .*-c constraints\.txt", makefile)


def test_the_license_is_an_spdx_string():
    assert _project()["license"] == "Apache-2.0"
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_the_wheel_builds_without_warnings(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False)
    if done.returncode and "No matching distribution" in done.stdout + done.stderr:
        pytest.skip("no package index reachable to build the wheel's build environment")
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in (done.stdout + done.stderr).splitlines()
                if re.search(r"\w+Warning\b", line)]
    assert not warnings, "\n".join(warnings)
    assert list(tmp_path.glob("tegrad-*.whl"))
