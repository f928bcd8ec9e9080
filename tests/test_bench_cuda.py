"""The GPU benchmark (``benchmarks/bench_cuda.py``): its smoke run, in Triton's
interpreter on CPU tensors, builds, checks and times every row of three small cases (a
``tg.nn`` product, a row reduction, a layer written with ``tg.compute``) on every side it
has without torch.compile, and writes them to its JSON."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is the benchmark's other side")
pytest.importorskip("triton", reason="the cuda target generates Triton kernels")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cuda.py"
CASES = ("matmul1024", "softmax_4096", "dynamic_filter_n8")
ROWS = ("forward", "backward", "forward+backward")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``bench_cuda.py --smoke --cases <CASES>`` under ``TRITON_INTERPRET=1``: (JSON,
    stdout)."""
    folder = tmp_path_factory.mktemp("bench_cuda")
    out = folder / "x.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "TEGRAD_CACHE_DIR": str(folder / "cache"),
           "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    env.pop("OUT", None)
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--cases", ",".join(CASES), "--json", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"bench_cuda.py failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(out.read_text()), done.stdout


def test_smoke_times_every_row_of_each_case(smoke):
    result, _ = smoke
    assert result["smoke"] and not result["compile"] and result["device"]["interpreted"]
    rows = {(r["case"], r["row"]): r for r in result["rows"]}
    assert set(rows) == {(c, row) for c in CASES for row in ROWS}
    for r in rows.values():
        assert set(r["times"]) == {"tegrad", "eager", "eager_tf32"}, (r["case"], r["row"])
        for side in r["times"].values():
            assert math.isfinite(side["ms"]) and side["ms"] > 0 and side["runs"] == 2
        assert r["tegrad_over_eager"] == pytest.approx(r["times"]["tegrad"]["ms"]
                                                       / r["times"]["eager"]["ms"])
        assert r["tegrad_over_compile"] is None


def test_smoke_checks_passed_for_every_side_row_and_tensor(smoke):
    result, stdout = smoke
    assert [c["case"] for c in result["cases"]] == list(CASES) and not result["skipped"]
    for case in result["cases"]:
        assert not case["errors"] and "error" not in case, case["case"]
        checked = {(c["side"], c["row"], c["tensor"]) for c in case["checks"]}
        grads = {f"d{name}" for name in case["inputs"]}
        for side in ("tegrad", "eager", "eager_tf32"):
            assert {t for s, row, t in checked if s == side and row == "backward"} == grads
            assert (side, "forward", "out") in checked
            assert {t for s, row, t in checked
                    if s == side and row == "forward+backward"} == grads | {"out"}
        assert all(c["ok"] for c in case["checks"]), case["case"]
        assert case["bitwise_backward"] is True
        assert set(case["first_call_ms"]["tegrad"]) >= {"graph_s", "forward", "backward",
                                                        "forward+backward"}
    assert "checks against torch float64" in stdout and "CHECK FAILED" not in stdout
