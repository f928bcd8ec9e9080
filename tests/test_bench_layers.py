"""The layer-shape benchmark (``benchmarks/bench_layers.py``): a smoke run on the NumPy
target of two small cases writes every row, its check against torch and the summary of
the tail; the summary counts from made-up rows; the case list covers the networks the
issue names, each shape once."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

_BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
_SCRIPT = _BENCH_DIR / "bench_layers.py"
SMOKE = ("losses.mse_loss", "resnet18.avgpool")

pytest.importorskip("torch", reason="PyTorch is the benchmark's other side")


def _load(name: str):
    if str(_BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(_BENCH_DIR))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``bench_layers.py --quick --target numpy --cases <SMOKE>``: (JSON, stdout)."""
    out = tmp_path_factory.mktemp("bench_layers") / "bench_layers.json"
    cmd = [sys.executable, str(_SCRIPT), "--quick", "--target", "numpy", "--threads", "1",
           "--pause", "0", "--cases", ",".join(SMOKE), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"bench_layers.py failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(out.read_text()), done.stdout


def test_smoke_times_every_row_of_both_cases(smoke):
    result, _ = smoke
    rows = {(r["case"], r["row"]): r for r in result["rows"]}
    rows_per_case = _load("bench_cpu_cases").ROWS
    assert set(rows) == {(c, row) for c in SMOKE for row in rows_per_case}
    for r in rows.values():
        for key in ("tegrad_ms", "torch_ms", "tegrad_over_torch"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["case"], r["row"], key)
        assert r["tegrad_over_torch"] == pytest.approx(r["tegrad_ms"] / r["torch_ms"])


def test_smoke_checked_each_differentiated_input_and_the_output(smoke):
    result, stdout = smoke
    checked = {(c["case"], c["row"], c["tensor"]) for c in result["checks"]}
    assert ("losses.mse_loss", "backward", "dtarget") in checked  # both inputs
    assert ("losses.mse_loss", "forward+backward", "dinput") in checked
    assert ("resnet18.avgpool", "forward", "out") in checked
    assert all(c["ok"] for c in result["checks"]) and not result["errors"]
    assert "check against torch: 10 tensors" in stdout


def test_smoke_summary_has_medians_counts_and_the_worst(smoke):
    result, stdout = smoke
    summary = result["summary"]
    assert set(summary) == {"forward", "backward", "forward+backward", "all rows"}
    every = summary["all rows"]
    assert every["rows"] == 6 and len(every["worst"]) == 6
    ratios = [w["tegrad_over_torch"] for w in every["worst"]]
    assert ratios == sorted(ratios, reverse=True)
    assert every["over_1.5"] == sum(r > 1.5 for r in ratios)
    assert "forward+backward: median" in stdout and "over 3.0x" in stdout


def _rows(ratios: dict) -> list[dict]:
    return [{"case": case, "row": row, "tegrad_over_torch": r} for (case, row), r in
            ratios.items()]


def test_the_summary_counts_the_tail_per_row_and_over_all():
    bench = _load("bench_layers")
    rows = _rows({("a", "forward"): 0.5, ("a", "forward+backward"): 1.6,
                  ("b", "forward"): 3.5, ("b", "forward+backward"): 1.0,
                  ("c", "forward+backward"): 4.0})
    s = bench.summarize(rows)
    both = s["forward+backward"]
    assert (both["rows"], both["median"], both["over_1.5"], both["over_3.0"]) == (3, 1.6, 2, 1)
    assert [w["case"] for w in both["worst"]] == ["c", "a", "b"]
    every = s["all rows"]
    assert (every["rows"], every["over_1.5"], every["over_3.0"]) == (5, 3, 2)
    assert every["worst"][0] == {"case": "c", "row": "forward+backward",
                                 "tegrad_over_torch": 4.0}
    assert s["backward"] == {"rows": 0, "median": None, "over_1.5": 0, "over_3.0": 0,
                             "worst": []}


def test_a_network_tolerates_its_rounding_and_a_layer_does_not():
    """The check's bound: float32 layers at bench_cpu's 1e-4; whole networks, summed in
    other orders over 20-50 layers, at 2e-3."""
    cases = _load("bench_layers_cases")
    by_name = {c.name: c for c in cases.cases()}
    assert by_name["resnet18.conv1"].tolerance == 1e-4
    for name in ("train.resnet18", "train.resnet50", "train.transformer", "train.lstm_lm"):
        assert by_name[name].tolerance == cases.NETWORK_TOLERANCE


def test_the_cases_cover_the_networks_once_each_shape():
    cases = _load("bench_layers_cases")
    found = cases.cases()
    networks = {c.network for c in found}
    assert networks == {"resnet18", "resnet50", "mobilenet_v2", "unet", "transformer",
                        "lstm_lm", "embedding", "losses", "train"}
    signatures = [cases._signature(c) for c in found]
    assert len(set(signatures)) == len(signatures)
    titles = " ".join(c.title for c in found)
    for shape in ("conv 7x7 s2 3->64 at 64^2", "conv 1x1 s2 64->128 at 16^2",
                  "conv 3x3 512->512 at 2^2", "depthwise conv 3x3 144->144 at 28^2",
                  "conv_transpose2d 2x2 s2 64->32", "max_pool2d 3x3 s2 p1, 8x64x32^2",
                  "embedding 50000x256, 4096 ids", "label_smoothing 0.1, 256x1000"):
        assert shape in titles, shape
    # ResNet-50's layer4 3x3 512->512 at 2^2 is ResNet-18's: kept once, under ResNet-18
    assert "resnet50.layer4.conv2" not in {c.name for c in found}


@pytest.mark.parametrize("spec, expected", [("losses.", 4), ("train.", 4), ("dw_s2", 3)])
def test_cases_are_chosen_by_parts_of_their_names(spec, expected):
    cases = _load("bench_layers_cases")
    assert len(cases.select(cases.cases(), spec)) == expected
    with pytest.raises(SystemExit, match="no case name contains nope"):
        cases.select(cases.cases(), "nope")


def test_each_case_builds_its_graph_with_the_gradients_torch_takes():
    """Targets, class weights, masks and ids are not differentiated; a network's images
    are not either (a training step's gradients are its parameters')."""
    cases = _load("bench_layers_cases")
    by_name = {c.name: c for c in cases.cases()}
    ce = by_name["losses.cross_entropy_weight_ignore_smoothing"]
    assert ce.differentiated() == (0,)
    assert by_name["embedding.50k"].differentiated() == (1,)
    assert by_name["transformer.mha_causal"].differentiated() == (0, 1, 2, 3, 4)
    step = by_name["train.transformer"]
    assert step.differentiated() == tuple(range(3, 15))
    graph = ce.graph()
    assert graph.wrt == [graph.inputs[0]] and len(graph.grads) == 1
