"""The docs' generated parts (``docs/hooks/generate.py``) on small inputs: the op list from
a case table, the benchmark tables from tiny JSON, the sentence for a missing file, and
the markers themselves."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("doc_hooks", ROOT / "docs" / "hooks" / "generate.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def row(case, name, tegrad, torch, jax=None):
    return {"case": case, "title": f"{case} title", "row": name, "tegrad_ms": tegrad,
            "torch_ms": torch, "tegrad_over_torch": tegrad / torch,
            "tegrad_over_jax": None if jax is None else tegrad / jax}


def run(scale=1.0, first_call=True):
    return {
        "target": "cpu", "runs": 15, "tegrad_backward": "saved", "jax_used": True,
        "machine": {"cpu_model": "Test CPU", "cpus_usable": 2, "python": "3.11.7",
                    "numpy": "2.4.6", "torch": "2.13.0", "jax": "0.10.2"},
        "threads": {"threads": 2, "tegrad_products": "mkl"},
        "rows": [row("mm", "forward", 1.0 * scale, 2.0, 4.0),
                 row("mm", "backward", 3.0 * scale, 2.0),
                 row("mm", "forward+backward", 4.0 * scale, 4.0, 8.0)],
        "first_call": [{"case": "mm", "cold": {"total_ms": 80.0},
                        "warm": {"graph_ms": 1.0, "build_ms": 0.5, "total_ms": 9.0}}]
        if first_call else [],
    }


SUMMARY = {
    "runs": 2, "sgemm_gflops": [190.4, 201.6],
    "per_run": [{"median_tegrad_over_torch": 0.95, "max_tegrad_over_torch": 1.5,
                 "max_row": "mm backward", "errors": 0, "disagreements": 0},
                {"median_tegrad_over_torch": 1.02, "max_tegrad_over_torch": 1.4,
                 "max_row": "mm backward", "errors": 1, "disagreements": 0}],
    "rows": {"mm forward": {"min": 0.5, "median": 0.55, "max": 0.6}},
    "targets": {"median": {"target": "median | at most 1.0", "met": 1, "runs": 2}},
}


def test_the_repeated_suite_page_says_what_the_json_records():
    text = hooks.runs_page(SUMMARY, [run(), run(scale=1.1)])
    assert "2 runs of the suite" in text
    assert "`python benchmarks/bench_repeat.py --repeat 2`" in text
    assert "processor Test CPU, 2 usable cores" in text and "15 timed runs" in text
    assert "| median \\| at most 1.0 | 1 of 2 runs |" in text  # a | in a cell is escaped
    assert "| mm forward | 0.50 | 0.55 | 0.60 |" in text
    assert "| 2 | 202 | 1.02 | 1.40 (mm backward) | 1 |" in text
    assert "The last run (2)" in text and "1.10 / 2.00 (**0.55x**)" in text
    assert "| mm | 80 | 1.5 | 9 |" in text


def test_a_case_table_has_a_line_per_case_and_jax_where_measured():
    lines = hooks.case_table(run()).splitlines()
    assert lines[2] == ("| mm | 1.00 / 2.00 (**0.50x**) | 3.00 / 2.00 (**1.50x**) "
                        "| 4.00 / 4.00 (**1.00x**) | 0.50x |")
    no_jax = run()
    for r in no_jax["rows"]:
        r["tegrad_over_jax"] = None
    assert hooks.case_table(no_jax).splitlines()[2].endswith("| - |")
    assert "No first calls" in hooks.first_call_table(run(first_call=False))


def test_two_trees_give_medians_ratios_spreads_and_the_command():
    text = hooks.trees_table({"before": [run(), run(scale=1.2)],
                              "after": [run(scale=0.9), run(scale=1.1)]}, "ab.json")
    assert "`ab.json`: 2 rounds" in text
    assert "--rounds 2 --cases mm --json ab.json" in text and "--no-compile" not in text
    assert "| mm forward | 1.10 | 1.00 | 0.909 | 1.20 | 1.22 |" in text
    assert "over the 3 rows" in text
    no_compile = hooks.trees_table({"before": [run(first_call=False)],
                                    "after": [run(first_call=False)]}, "f.json")
    assert "--no-compile" in no_compile


def test_the_op_list_groups_cases_by_family_with_first_sentences():
    cases = [SimpleNamespace(op="relu", label="", category="activation"),
             SimpleNamespace(op="relu", label="size-1 dims", category="activation"),
             SimpleNamespace(op="add", label="broadcast", category="arithmetic")]
    docs = {"relu": "``max(x, 0)``. Derivative 1/2 at 0.\n\nMore."}
    text = hooks.op_list(cases, ("arithmetic", "activation", "loss"), docs.get)
    assert text.startswith("2 operators (1 `tg.nn` functions and 1 tensor operators), "
                           "3 cases, in 3 families.")
    assert "### Loss" not in text
    assert text.index("### Arithmetic") < text.index("### Activation")
    assert "| `relu` | 2: default; size-1 dims | ``max(x, 0)``. |" in text
    assert "| `add` | 1: broadcast | tensor arithmetic" in text


def test_the_real_op_list_covers_every_nn_function():
    text = hooks.GENERATORS["ops"](ROOT)
    assert "`tg.nn` functions without a case: none." in text
    assert "| `conv2d` |" in text


def test_the_test_list_reads_module_docstrings():
    text = hooks.test_list({"test_b.py": '"""Second. More."""', "test_a.py": "x = 1\n"})
    assert text.splitlines()[2:] == ["| `test_a.py` | - |", "| `test_b.py` | Second. |"]


def test_missing_json_names_the_command_that_writes_it(tmp_path):
    assert "`make bench-cpu-runs` writes it" in hooks.GENERATORS["bench-cpu-runs"](tmp_path)
    assert "`make bench-cpu` writes it" in hooks.GENERATORS["bench-cpu"](tmp_path)
    assert "bench_ab_trees.py" in hooks.GENERATORS["bench-ab-trees"](tmp_path)


def test_runs_are_read_in_the_order_of_their_numbers(tmp_path):
    folder = tmp_path / "reports" / "bench_cpu_runs"
    folder.mkdir(parents=True)
    for i in (1, 2, 10):
        (folder / f"run_{i}.json").write_text(json.dumps(run(scale=i)))
    (folder / "summary.json").write_text(json.dumps({**SUMMARY, "runs": 3,
                                                     "sgemm_gflops": [1.0, 2.0, 3.0],
                                                     "per_run": SUMMARY["per_run"] * 2}))
    with pytest.raises(ValueError):  # per_run and sgemm_gflops disagree in length
        hooks.GENERATORS["bench-cpu-runs"](tmp_path)
    (folder / "summary.json").write_text(json.dumps({**SUMMARY, "runs": 3,
                                                     "sgemm_gflops": [1.0, 2.0, 3.0],
                                                     "per_run": SUMMARY["per_run"][:1] * 3}))
    assert "The last run (3)" in hooks.GENERATORS["bench-cpu-runs"](tmp_path)
    assert "10.00 / 2.00" in hooks.GENERATORS["bench-cpu-runs"](tmp_path)


def test_markers_are_filled_and_an_unknown_one_fails(tmp_path):
    page = "Intro\n<!-- generate: bench-cpu -->\nEnd\n"
    assert hooks.fill(page, tmp_path) == (
        "Intro\n" + hooks.GENERATORS["bench-cpu"](tmp_path) + "\nEnd\n")
    assert hooks.fill("no markers", tmp_path) == "no markers"
    with pytest.raises(ValueError, match="unknown generated part 'nope'"):
        hooks.fill("<!-- generate: nope -->", tmp_path)


def test_the_layer_page_gives_the_summary_and_every_case():
    layers = {"runs": 5, "thresholds": [1.5, 3.0], "other_load_cores": 0.1,
              "machine": {"cpu_model": "Test CPU", "cpus_usable": 2, "torch": "2.13.0"},
              "threads": {"threads": 1},
              "rows": [row("net.conv", "forward", 3.0, 1.0), row("net.conv", "backward", 1.0, 1.0),
                       row("net.conv", "forward+backward", 4.0, 2.0),
                       row("net.pool", "forward", 0.5, 1.0)],
              "summary": {"forward": {"rows": 2, "median": 1.75, "over_1.5": 1, "over_3.0": 0,
                                      "worst": [{"case": "net.conv", "row": "forward",
                                                 "tegrad_over_torch": 3.0}]}}}
    page = hooks.layers_page(layers, "reports/bench_layers.json")
    assert "| forward | 2 | 1.75 | 1 | 0 | net.conv 3.00 |" in page
    assert "| net.conv | net.conv title | 3.00 | 1.00 | 2.00 | 4.00 | 2.00 |" in page
    assert "| net.pool | net.pool title | 0.50 | - | - | - | - |" in page
    assert "--threads 1 --runs 5 --json reports/bench_layers.json" in page
