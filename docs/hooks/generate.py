"""The generated parts of the docs, filled in at build time (a mkdocs hook: ``hooks:`` in
``mkdocs.yml``).

A page asks for a part with a line of its own, ``<!-- generate: NAME -->``; the hook
replaces that line with the part's Markdown, made from what the repository holds now:

- ``ops``: the ``tg.nn`` operators by family, from the op-spec table
  (``tegrad.coverage.cases.CASES``) and each function's docstring;
- ``bench-cpu-runs``: the repeated CPU suite, ``reports/bench_cpu_runs/`` (``summary.json``
  and ``run_*.json`` of ``benchmarks/bench_repeat.py``);
- ``bench-cpu``: one run of the suite, ``reports/bench_cpu.json`` (``bench_cpu.py``);
- ``bench-ab-trees``: two source trees in turns, ``reports/issue28/*.json``
  (``bench_ab_trees.py``);
- ``bench-layers``: the layer shapes of real networks, ``reports/bench_layers.json``
  (``bench_layers.py``);
- ``tests``: the test modules, each with the first sentence of its docstring.

A JSON file that is missing gives a sentence naming the command that writes it, not a
failure; an unknown NAME fails the build. The render functions take plain dicts, so
``tests/test_doc_hooks.py`` runs them on small JSON.
"""

from __future__ import annotations

import ast
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generate: ([\w-]+) -->[ \t]*$", re.MULTILINE)
ROWS = ("forward", "backward", "forward+backward")


def on_page_markdown(markdown: str, page, config, files) -> str:  # the mkdocs hook
    return fill(markdown)


def fill(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every marker replaced by its generated part."""
    def part(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated part {name!r} (known: {sorted(GENERATORS)})")
        return GENERATORS[name](root).strip()
    return MARKER.sub(part, markdown)


def _cell(text: str) -> str:
    """Text that is safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _missing(path: str, command: str) -> str:
    return (f"*Not measured in this checkout:* `{path}` is missing. `{command}` writes it, "
            f"and the next docs build shows it here.")


def _first_sentence(doc: str | None) -> str:
    """The first paragraph of a docstring, cut after its first sentence."""
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"(?<=[.)])\s+(?=[A-Z`])", text)
    return text[:end.start()] if end else text


# the operator library ----------------------------------------------------------------------


def op_list(cases: list, categories: tuple[str, ...], doc_of: Callable[[str], str | None]) -> str:
    """A table per family of the ops in ``cases`` (``Case``-like: ``op``, ``label``,
    ``category``), in table order, with the count and labels of each op's cases and the
    first sentence of ``doc_of(op)`` (None: not a ``tg.nn`` function)."""
    by_op: dict[str, dict[str, list[str]]] = {c: {} for c in categories}
    for case in cases:
        by_op[case.category].setdefault(case.op, []).append(case.label or "default")
    total = sum(len(ops) for ops in by_op.values())
    functions = sum(doc_of(op) is not None for ops in by_op.values() for op in ops)
    out = [f"{total} operators ({functions} `tg.nn` functions and {total - functions} "
           f"tensor operators), {len(cases)} cases, in {len(categories)} families."]
    for category in categories:
        ops = by_op[category]
        if not ops:
            continue
        out += ["", f"### {category.capitalize()}", "",
                "| op | cases | computes |", "| --- | --- | --- |"]
        for op, labels in ops.items():
            doc = doc_of(op)
            what = (_first_sentence(doc) if doc is not None
                    else "tensor arithmetic: an operator on tensors, NumPy broadcasting "
                    "(not a `tg.nn` function)")
            out.append(f"| `{op}` | {len(labels)}: {_cell('; '.join(labels))} | {_cell(what)} |")
    return "\n".join(out)


def _ops(root: Path) -> str:
    sys.path.insert(0, str(root / "src"))  # document this checkout's tegrad
    import tegrad.coverage.table  # noqa: F401  (fills CASES)
    from tegrad import nn
    from tegrad.coverage.cases import CASES, CATEGORIES
    text = op_list(CASES, CATEGORIES, lambda op: (getattr(nn, op).__doc__ or "")
                   if op in nn.__all__ else None)
    untested = sorted(set(nn.__all__) - {c.op for c in CASES})
    return text + ("\n\n`tg.nn` functions without a case: " +
                   (", ".join(f"`{n}`" for n in untested) if untested else "none") + ".")


# the CPU suite ----------------------------------------------------------------------------


def _machine(runs: list[dict]) -> str:
    """The machine facts the runs' JSON records, each value once."""
    def values(get) -> str:
        return ", ".join(dict.fromkeys(str(get(r)) for r in runs))
    return (f"processor {values(lambda r: r['machine']['cpu_model'])}, "
            f"{values(lambda r: r['machine']['cpus_usable'])} usable cores, "
            f"{values(lambda r: r['threads']['threads'])} threads per side; Python "
            f"{values(lambda r: r['machine']['python'])}, NumPy "
            f"{values(lambda r: r['machine']['numpy'])}, torch "
            f"{values(lambda r: r['machine']['torch'])}, JAX "
            f"{values(lambda r: r['machine'].get('jax') if r['jax_used'] else 'not used')}; "
            f"tegrad target `{values(lambda r: r['target'])}`, products on "
            f"{values(lambda r: r['threads']['tegrad_products'])}, backward "
            f"`{values(lambda r: r['tegrad_backward'])}`; "
            f"{values(lambda r: r['runs'])} timed runs per side and row")


def case_table(run: dict) -> str:
    """One suite run, a line per case: each row's tegrad and torch milliseconds and their
    ratio, and forward+backward against ``jax.jit`` (as ``bench_repeat.py --table``)."""
    by_case: dict[str, dict[str, dict]] = {}
    for r in run["rows"]:
        by_case.setdefault(r["case"], {})[r["row"]] = r
    out = ["| case | forward: ms (tegrad / torch) | backward | forward+backward "
           "| tegrad / jax.jit (fwd+bwd) |", "| --- | --- | --- | --- | --- |"]
    for case, rows in by_case.items():
        cells = [f"{r['tegrad_ms']:.2f} / {r['torch_ms']:.2f} (**{r['tegrad_over_torch']:.2f}x**)"
                 if r else "-" for r in (rows.get(k) for k in ROWS)]
        jax = (rows.get("forward+backward") or {}).get("tegrad_over_jax")
        out.append(f"| {case} | {' | '.join(cells)} | "
                   f"{'-' if jax is None else f'{jax:.2f}x'} |")
    return "\n".join(out)


def _titles(run: dict) -> str:
    """What each case of a run is, as its rows' titles say."""
    titles = {r["case"]: r.get("title", r["case"]) for r in run["rows"]}
    return "; ".join(f"{case}: {title}" for case, title in titles.items())


def first_call_table(run: dict) -> str:
    """Per case, the first call in a new process with an empty and with a warm cache."""
    out = ["| case | empty cache: generation + compilation + first call, ms "
           "| warm cache: generation + build, ms | warm cache: with the first call, ms |",
           "| --- | --- | --- | --- |"]
    for f in run.get("first_call") or []:
        if "warm" in f:
            warm = f["warm"]["graph_ms"] + f["warm"]["build_ms"]
            out.append(f"| {f['case']} | {f['cold']['total_ms']:.0f} | {warm:.1f} "
                       f"| {f['warm']['total_ms']:.0f} |")
    return "\n".join(out) if len(out) > 2 else "No first calls in this run (`--no-compile`)."


def runs_page(summary: dict, runs: list[dict]) -> str:
    """The repeated suite: targets met, each row's range over the runs, each run, and the
    last run's milliseconds and first calls."""
    n = summary["runs"]
    out = [f"{n} runs of the suite, each a new process, one after the other; "
           f"{_machine(runs)}. Made by `python benchmarks/bench_repeat.py --repeat {n}` "
           f"(`make bench-cpu-runs` makes five); `python benchmarks/bench_repeat.py "
           f"--summarize reports/bench_cpu_runs/run_*.json --table` prints them again.",
           "", "| target | met in |", "| --- | --- |"]
    out += [f"| {_cell(t['target'])} | {t['met']} of {t['runs']} runs |"
            for t in summary["targets"].values()]
    out += ["", "tegrad's time over torch's, per row, over the runs (below 1: tegrad faster):",
            "", "| row | min | median | max |", "| --- | --- | --- | --- |"]
    out += [f"| {row} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} |"
            for row, s in summary["rows"].items()]
    out += ["", "Each run:", "", "| run | sgemm GFLOP/s | median tegrad / torch | largest row "
            "| failures |", "| --- | --- | --- | --- | --- |"]
    for i, (s, gflops) in enumerate(zip(summary["per_run"], summary["sgemm_gflops"],
                                        strict=True)):
        largest = f"{s['max_tegrad_over_torch']:.2f} ({s['max_row']})" if "max_row" in s else "-"
        median = (f"{s['median_tegrad_over_torch']:.2f}"
                  if s.get("median_tegrad_over_torch") is not None else "-")
        out.append(f"| {i + 1} | {gflops:.0f} | {median} | {largest} "
                   f"| {s['errors'] + s['disagreements']} |")
    if runs:
        out += ["", f"The last run ({len(runs)}), in milliseconds ({_titles(runs[-1])}):",
                "", case_table(runs[-1]),
                "", "Its first calls, each in a new process:", "", first_call_table(runs[-1])]
    return "\n".join(out)


def _run_number(path: Path) -> int:
    return int(re.sub(r"\D", "", path.stem) or 0)


def _bench_cpu_runs(root: Path) -> str:
    folder = root / "reports" / "bench_cpu_runs"
    if not (folder / "summary.json").exists():
        return _missing("reports/bench_cpu_runs/summary.json", "make bench-cpu-runs")
    summary = json.loads((folder / "summary.json").read_text())
    runs = [json.loads(p.read_text())
            for p in sorted(folder.glob("run_*.json"), key=_run_number)]
    return runs_page(summary, runs)


def _bench_cpu(root: Path) -> str:
    path = root / "reports" / "bench_cpu.json"
    if not path.exists():
        return _missing("reports/bench_cpu.json", "make bench-cpu")
    run = json.loads(path.read_text())
    return (f"One run: {_machine([run])}; made by `make bench-cpu` "
            f"(`python benchmarks/bench_cpu.py --markdown`). In milliseconds "
            f"({_titles(run)}):\n\n{case_table(run)}\n\n"
            f"First calls, each in a new process:\n\n{first_call_table(run)}")


# the layer shapes ---------------------------------------------------------------------------


def layers_page(run: dict, path: str) -> str:
    """``bench_layers.py --json``'s run: the summary per row kind (median, the counts over
    the thresholds, the five worst), then every case's three ratios."""
    slow, very = run["thresholds"]
    lines = [f"| rows | cases | median tegrad/torch | over {slow}x | over {very}x | worst |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, s in run["summary"].items():
        worst = ", ".join(f"{w['case']}" + (f" {w['row']}" if name == "all rows" else "")
                          + f" {w['tegrad_over_torch']:.2f}" for w in s["worst"][:5])
        lines.append(f"| {name} | {s['rows']} | {s['median']:.2f} | {s['over_' + str(slow)]} | "
                     f"{s['over_' + str(very)]} | {_cell(worst)} |")
    cases: dict = {}
    for r in run["rows"]:
        cases.setdefault(r["case"], {"title": r["title"]})[r["row"]] = r
    table = ["| case | layer | " + " | ".join(ROWS) + " | tegrad ms | torch ms |",
             "| --- | --- | " + " | ".join("---:" for _ in ROWS) + " | ---: | ---: |"]
    for case, got in cases.items():
        whole = got.get("forward+backward")
        ratios = " | ".join(f"{got[k]['tegrad_over_torch']:.2f}" if k in got else "-"
                            for k in ROWS)
        times = (f"{whole['tegrad_ms']:.2f} | {whole['torch_ms']:.2f}" if whole else "- | -")
        table.append(f"| {case} | {_cell(got['title'])} | {ratios} | {times} |")
    m, t = run["machine"], run["threads"]
    head = (f"One run, `{path}`: processor {m['cpu_model']}, {m['cpus_usable']} usable "
            f"cores, {t['threads']} thread(s) per side, torch {m['torch']}; medians of "
            f"{run['runs']} runs per row, the sides in turns; other processes kept "
            f"{run['other_load_cores']:.2f} cores busy on average. Made by `python "
            f"benchmarks/bench_layers.py --threads {t['threads']} --runs {run['runs']} "
            f"--json {path}`.")
    return f"{head}\n\n" + "\n".join(lines) + "\n\nPer case, tegrad/torch:\n\n" + \
        "\n".join(table)


def _bench_layers(root: Path) -> str:
    path = root / "reports" / "bench_layers.json"
    if not path.exists():
        return _missing("reports/bench_layers.json",
                        "python benchmarks/bench_layers.py --json reports/bench_layers.json")
    return layers_page(json.loads(path.read_text()), "reports/bench_layers.json")


# two source trees ---------------------------------------------------------------------------


def trees_table(results: dict, name: str) -> str:
    """``bench_ab_trees.py --json``'s rounds (``{"before": [run, ...], "after": [...]}``):
    per row each tree's median tegrad time, their ratio, and each tree's spread over the
    rounds (max / min), the noise a ratio has to beat."""
    before, after = results["before"], results["after"]
    times: dict[str, dict[str, list[float]]] = {}
    for side, runs in (("before", before), ("after", after)):
        for run in runs:
            for r in run["rows"]:
                times.setdefault(f"{r['case']} {r['row']}", {"before": [], "after": []})[
                    side].append(r["tegrad_ms"])
    cases = ",".join(dict.fromkeys(r["case"] for r in before[0]["rows"]))
    compile_flag = "" if before[0].get("first_call") else " --no-compile"
    out = [f"`{name}`: {len(before)} rounds; {_machine(before + after)}. Made by "
           f"`python benchmarks/bench_ab_trees.py --before OLD_TREE --after . --rounds "
           f"{len(before)} --cases {cases}{compile_flag} --json {name}`.", "",
           "| row | before: median ms | after: median ms | after / before "
           "| spread before | spread after |", "| --- | --- | --- | --- | --- | --- |"]
    ratios = []
    for row, t in times.items():
        b, a = statistics.median(t["before"]), statistics.median(t["after"])
        ratios.append(a / b)
        out.append(f"| {row} | {b:.2f} | {a:.2f} | {a / b:.3f} "
                   f"| {max(t['before']) / min(t['before']):.2f} "
                   f"| {max(t['after']) / min(t['after']):.2f} |")
    out += ["", f"Median after / before over the {len(ratios)} rows: "
            f"{statistics.median(ratios):.3f}."]
    return "\n".join(out)


def _bench_ab_trees(root: Path) -> str:
    paths = sorted((root / "reports" / "issue28").glob("*.json"))
    if not paths:
        return _missing("reports/issue28/*.json", "python benchmarks/bench_ab_trees.py "
                        "--before OLD_TREE --json FILE")
    return "\n\n".join(trees_table(json.loads(p.read_text()), str(p.relative_to(root)))
                       for p in paths)


# the tests -----------------------------------------------------------------------------------


def test_list(modules: dict[str, str]) -> str:
    """A table of test modules (``{file name: source}``) and their docstrings' first
    sentences."""
    out = ["| module | what it tests |", "| --- | --- |"]
    for name, source in sorted(modules.items()):
        doc = ast.get_docstring(ast.parse(source)) or ""
        out.append(f"| `{name}` | {_cell(_first_sentence(doc)) or '-'} |")
    return "\n".join(out)


def _tests(root: Path) -> str:
    return test_list({p.name: p.read_text() for p in (root / "tests").glob("test_*.py")})


GENERATORS: dict[str, Callable[[Path], str]] = {
    "ops": _ops,
    "bench-cpu-runs": _bench_cpu_runs,
    "bench-cpu": _bench_cpu,
    "bench-ab-trees": _bench_ab_trees,
    "bench-layers": _bench_layers,
    "tests": _tests,
}
