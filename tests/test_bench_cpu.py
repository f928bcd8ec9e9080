"""The CPU benchmark suite (``benchmarks/bench_cpu.py``): a smoke run on the NumPy target
writes the rows and a finite ratio to its JSON, and its agreement check flags a wrong
result (a benchmark that cannot fail its check would time wrong code happily)."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
_SCRIPT = _BENCH_DIR / "bench_cpu.py"


def _load(name: str):
    """A benchmark module by name (the scripts import their siblings the same way)."""
    if str(_BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(_BENCH_DIR))
    return importlib.import_module(name)


cases_module = _load("bench_cpu_cases")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``bench_cpu.py --quick --target numpy --cases softmax --no-compile``: (JSON, stdout)."""
    out = tmp_path_factory.mktemp("bench_cpu") / "bench_cpu.json"
    cmd = [sys.executable, str(_SCRIPT), "--quick", "--target", "numpy", "--cases", "softmax",
           "--no-compile", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_cpu.py failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize("row", cases_module.ROWS)
def test_smoke_row_has_finite_times_and_ratio(smoke, row):
    result, _ = smoke
    (found,) = [r for r in result["rows"] if r["case"] == "softmax" and r["row"] == row]
    for key in ("tegrad_ms", "torch_ms", "tegrad_over_torch", "tegrad_gflops", "pct_sgemm"):
        assert math.isfinite(found[key]) and found[key] > 0, (row, key, found[key])
    assert found["tegrad_over_torch"] == pytest.approx(found["tegrad_ms"] / found["torch_ms"])


def test_smoke_checked_every_row_and_wrote_the_summary(smoke):
    result, stdout = smoke
    tegrad = {(c["row"], c["tensor"]) for c in result["checks"] if c["side"] == "tegrad"}
    assert tegrad == {("forward", "out"), ("backward", "dX"), ("forward+backward", "out"),
                      ("forward+backward", "dX")}
    assert all(c["ok"] for c in result["checks"])
    assert result["sgemm_gflops"] > 0 and result["threads"]["torch"] >= 1
    assert isinstance(result["summary"]["softmax_backward_beats_torch"], bool)
    assert "summary: median tegrad/torch" in stdout
    assert result["tegrad_backward"] == "saved" and "forward kept" in stdout


@pytest.mark.parametrize("backward", ["saved", "recompute"])
def test_both_backward_programs_give_the_gradients(backward):
    """The backward row's two tegrad programs: ``tg.build_vjp``'s backward on what its
    forward kept, and the gradient program alone."""
    case = cases_module.lstm_case(3, 2, 4, 5)
    graph = case.graph()
    arrays, head = case.make_arrays(graph)
    programs = cases_module.tegrad_programs(graph, "numpy", arrays, backward)
    both = programs["forward+backward"](arrays, head)
    for got, want in zip(programs["backward"](arrays, head), both[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="saved or recompute"):
        cases_module.tegrad_programs(graph, "numpy", arrays, "both")


@pytest.mark.parametrize("perturb, ok", [(0.0, True), (1e-7, True), (1e-2, False)])
def test_check_flags_a_wrong_result(perturb, ok):
    bench = _load("bench_cpu")
    case = cases_module.softmax_case(4, 8)
    want = np.random.default_rng(0).standard_normal((4, 8))
    got = (want + perturb * np.abs(want).max()).astype(np.float32)
    (record,) = bench.check(case, "tegrad", "forward", [got], [want], ["out"])
    assert record["ok"] is ok


@pytest.mark.parametrize("spec, names", [
    ("softmax", ["softmax"]),
    ("conv2d", ["conv2d_s1", "conv2d_s2"]),
    ("matmul512, lstm", ["matmul512", "lstm"]),
])
def test_case_selection(spec, names):
    picked = cases_module.select(cases_module.cases(quick=False), spec)
    assert [c.name for c in picked] == names


def test_case_selection_names_the_choices_for_an_unknown_case():
    with pytest.raises(SystemExit, match="no case named nope; choose from matmul512"):
        cases_module.select(cases_module.cases(quick=False), "nope")


def test_blas_comparison_runs_and_checks_its_products():
    """``bench_blas.py`` times MKL against OpenBLAS (and tegrad's kernel) through the same
    helper, after checking each product against float64 (skipped without MKL)."""
    from tegrad.backends.cpu import gemm

    if gemm._mkl_path() is None:
        pytest.skip("MKL is not installed (pip install tegrad[mkl])")
    cmd = [sys.executable, str(_BENCH_DIR / "bench_blas.py"), "--runs", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_blas.py failed:\n{done.stdout}\n{done.stderr}"
    assert "32 x 1024 x 256" in done.stdout and "mkl/openblas" in done.stdout
    assert "kernel/mkl" in done.stdout


@pytest.mark.parametrize("knob, case", [("stream", "softmax"), ("rows", "lstm"),
                                       ("phases", "conv2d_s2"), ("widen", "conv2d_s2"),
                                       ("overlap", "conv2d_s1"), ("merge", "lstm"),
                                       ("unread", "lstm"), ("keep", "lstm")])
def test_setting_comparison_runs(knob, case):
    """``bench_ab.py`` builds a case with a setting on and off and times both beside torch
    (a smoke run on the small shapes)."""
    pytest.importorskip("torch")
    cmd = [sys.executable, str(_BENCH_DIR / "bench_ab.py"), "--knob", knob, "--case", case,
           "--quick", "--rounds", "1", "--block", "1", "--pause", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_ab.py failed:\n{done.stdout}\n{done.stderr}"
    assert f"{case} backward, {knob} on / off" in done.stdout and "on / torch" in done.stdout


@pytest.mark.parametrize("threads, runs, blocks", [(1, 5, 5), (2, 9, 3), (2, 2, 2), (2, 10, 4)])
def test_sides_take_turns_in_short_blocks(threads, runs, blocks):
    """``time_alternating``: every side gets ``runs`` timed calls or a few more, in turns,
    in blocks of at most ``BLOCK_RUNS`` with more than one thread (each after an untimed
    call), so that a burst of load on the machine lands on no one side's whole half."""
    shared = _load("bench_shared")
    calls: list[str] = []
    fns = [lambda: calls.append("a"), None, lambda: calls.append("b")]
    got = shared.time_alternating(fns, runs, threads, pause=0)
    assert got[1] is None and got[0] >= 0 and got[2] >= 0
    per_block = -(-runs // blocks)
    untimed = 1 if threads > 1 else 0
    block = ["a"] * (per_block + untimed) + ["b"] * (per_block + untimed)
    assert calls == ["a", "b"] + block * blocks
    assert threads == 1 or per_block <= shared.BLOCK_RUNS


def _run_result(ratios: dict, *, cold=(100.0, 900.0), warm_generation=(3.0, 20.0)) -> dict:
    """A ``bench_cpu.py`` result with these tegrad/torch ratios (``{(case, row): ratio}``)
    and first calls for matmul512 and the LSTM, summarized as the suite does."""
    bench = _load("bench_cpu")
    rows = [{"case": case, "row": row, "tegrad_over_torch": r}
            for (case, row), r in ratios.items()]
    first = [{"case": case, "cold": {"total_ms": c},
              "warm": {"graph_ms": g / 2, "build_ms": g / 2, "total_ms": g + 10}}
             for case, c, g in zip(("matmul512", "lstm"), cold, warm_generation, strict=True)]
    return {"rows": rows, "first_call": first, "summary": bench.summarize(rows, first),
            "sgemm_gflops": 250.0, "errors": [], "checks": [{"ok": True}]}


def test_repeated_runs_are_counted_against_each_target():
    """``bench_repeat.summarize_runs``: each row's range over the runs, and per target the
    runs that met it (a run with a row above 1.5 misses that one target only)."""
    repeat = _load("bench_repeat")
    base = {("softmax", "backward"): 0.8, ("layer_norm", "backward"): 0.7,
            ("conv2d_s1", "forward"): 1.2}
    runs = [_run_result(base), _run_result({**base, ("conv2d_s1", "forward"): 1.6}),
            _run_result({**base, ("softmax", "backward"): 1.1}, cold=(100.0, 2500.0))]
    failed = {"rows": [], "first_call": [], "summary": {}, "sgemm_gflops": 250.0,
              "errors": ["conv2d_s1: boom"], "checks": []}
    summary = repeat.summarize_runs([*runs, failed])
    assert summary["runs"] == 4 and summary["per_run"][3]["errors"] == 1
    met = {name: (t["met"], t["runs"]) for name, t in summary["targets"].items()}
    assert met == {"median": (2, 3), "largest": (2, 3), "softmax": (2, 3),
                   "layer_norm": (3, 3), "cold": (2, 3), "warm": (3, 3)}
    conv = summary["rows"]["conv2d_s1 forward"]
    assert (conv["min"], conv["median"], conv["max"]) == (1.2, 1.2, 1.6)
    assert conv["ratios"] == [1.2, 1.6, 1.2, None]  # the failed run had no rows
    repeat.report(summary)  # prints a failed run's line too
    assert summary["first_call_ms"]["ops"]["cold_total"] == [100.0, 100.0]
    assert summary["first_call_ms"]["lstm"]["cold_total"] == [900.0, 2500.0]
    assert summary["first_call_ms"]["lstm"]["warm_generation"] == [20.0, 20.0]


def test_repeated_runs_write_each_run_and_the_summary(tmp_path, smoke):
    """``bench_repeat.py`` runs the suite in new processes and writes each run's JSON and
    ``summary.json``; ``--summarize`` reads runs already made (``--table``: the last as a
    line per case); a run that fails makes the exit status 1."""
    script = str(_BENCH_DIR / "bench_repeat.py")
    cmd = [sys.executable, script, "--repeat", "1", "--out", str(tmp_path), "--", "--quick",
           "--target", "numpy", "--cases", "softmax", "--no-compile", "--no-jax"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_repeat.py failed:\n{done.stdout}\n{done.stderr}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["runs"] == 1 and (tmp_path / "run_1.json").exists()
    runs = json.loads((tmp_path / "run_1.json").read_text())["runs"]
    assert runs == _load("bench_repeat").RUNS == 15  # its default
    assert set(summary["rows"]) == {"softmax forward", "softmax backward",
                                    "softmax forward+backward"}
    assert "tegrad/torch per row in each of 1 runs" in done.stdout
    first = tmp_path / "run_1.json"
    second = tmp_path / "again" / "run_2.json"
    second.parent.mkdir()
    second.write_text(json.dumps(smoke[0]))
    done = subprocess.run([sys.executable, script, "--summarize", str(first), str(second),
                           "--out", str(second.parent), "--table"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    row = next(r for r in smoke[0]["rows"] if r["case"] == "softmax" and r["row"] == "forward")
    assert f"| softmax | {row['tegrad_ms']:.2f} vs {row['torch_ms']:.2f} (**" in done.stdout
    assert json.loads((second.parent / "summary.json").read_text())["runs"] == 2
    bad = [sys.executable, script, "--repeat", "1", "--out", str(tmp_path / "bad"), "--",
           "--quick", "--cases", "nosuch"]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1 and "no run wrote its results" in done.stderr


def test_summarized_runs_are_taken_in_the_order_of_their_numbers():
    """A shell's ``run_*.json`` lists ``run_10`` before ``run_2``: ``--summarize`` puts run
    10 last, so that run ``i`` of the report is ``run_i.json`` and ``--table`` prints the
    last run made."""
    repeat = _load("bench_repeat")
    paths = [Path(f"r/run_{i}.json") for i in (1, 10, 2, 9)] + [Path("a/run_3.json")]
    assert [p.name for p in repeat.in_run_order(paths)] == [
        "run_3.json", "run_1.json", "run_2.json", "run_9.json", "run_10.json"]


def test_weight_gradient_layouts_agree_with_torch_and_are_timed():
    """``bench_conv_wgrad.py`` (the layouts the README's conv2d entry compares) checks every
    layout's weight gradient against torch's before timing (a smoke run, small shapes)."""
    pytest.importorskip("torch")
    cmd = [sys.executable, str(_BENCH_DIR / "bench_conv_wgrad.py"), "--quick", "--runs", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_conv_wgrad.py failed:\n{done.stdout}\n{done.stderr}"
    assert "disagrees" not in done.stdout
    for layout in ("im2col", "shifted^T", "folded^T", "torch"):
        assert layout in done.stdout


def test_guard_benchmark_runs():
    """``bench_guards.py --quick``: every case checked against torch and timed (a smoke run
    on small shapes)."""
    pytest.importorskip("torch")
    cmd = [sys.executable, str(_BENCH_DIR / "bench_guards.py"), "--quick", "--runs", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_guards.py failed:\n{done.stdout}\n{done.stderr}"
    for case in ("pad_rows", "pad_cols", "window", "upsample"):
        assert case in done.stdout
    assert "tegrad/torch: median" in done.stdout
