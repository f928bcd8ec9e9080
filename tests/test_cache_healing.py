"""The disk cache heals itself (``cache/location.py``, ``cache/disk.py``,
``backends/cpu/compiler.py``) and ``tegrad cache`` shows and clears it.

- A cached library cut short (to its first 100 bytes, or to half: the loader would kill
  the process with SIGBUS) or replaced by garbage: the next process compiles it again,
  replaces the file and warns once; its values are right.
- A stored program that cannot be unpickled: made again with one warning, and the next call
  loads the rewritten entry without one. When the remade result is not stored, the damaged
  file goes.
- A ``TEGRAD_CACHE_DIR`` that cannot be used (under a regular file, read-only, in /proc):
  one warning, builds work, their files land in the process's temporary fallback.
- Processes building the same programs into one new cache at once all get the right values
  and no warning, and leave only whole files.
- ``tegrad cache`` counts the files by part; ``tegrad cache clear`` removes tegrad's own
  and leaves the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler
from tegrad.backends.cpu.library_file import damage
from tegrad.cache import contents, location, serialize
from tegrad.cache import disk as disk_cache
from tegrad.cli import EXIT_OK, EXIT_USAGE, main
from tegrad.errors import CacheWarning

needs_gcc = pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
F64 = "float64"

# Prints the values of a small program built on the cpu target, the warnings of its build
# and the file name of its library (the one library loaded after the helpers' and the call
# extension's).
BUILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    import numpy as np

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tegrad as tg
        from tegrad.backends.cpu import compiler
        from tegrad.backends.cpu.kernel_call import copy_helper, extension, gemm_helper

        if len(sys.argv) > 1:  # ready file, go file: start with the other processes
            open(sys.argv[1], "w").close()
            while not os.path.exists(sys.argv[2]):
                time.sleep(0.002)
        copy_helper(), gemm_helper(), extension()
        before = set(compiler._LOADED)
        x, h = tg.placeholder((4,), "float64", "x"), tg.placeholder((4,), "float64", "h")
        y = tg.compute((4,), lambda i: tg.sin(x[i]) * 2.0, name="y")
        f = tg.build([x, h], [y, *tg.gradient(y, [x], head=h)], target="cpu")
        values = [r.tolist() for r in f(np.arange(4.0), np.ones(4))]
    (library,) = set(compiler._LOADED) - before
    print(json.dumps({"values": values, "library": f"{library}.so",
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
""")
WANT = [(2 * np.sin(np.arange(4.0))).tolist(), (2 * np.cos(np.arange(4.0))).tolist()]


def environment(cache: Path, graphs: bool = False) -> dict:
    return {**os.environ, "TEGRAD_CACHE_DIR": str(cache),
            "TEGRAD_GRAPH_CACHE": "1" if graphs else "0",
            "PYTHONPATH": str(Path(tg.__file__).parents[1])}


def build_in_a_process(cache: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", BUILD], env=environment(cache),
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache holding the program of ``BUILD`` (and the helpers' libraries)."""
    cache = tmp_path_factory.mktemp("built")
    first = build_in_a_process(cache)
    assert first["warnings"] == [] and np.allclose(first["values"], WANT)
    return cache, first["library"]


# libraries --------------------------------------------------------------------------------

DAMAGES = {
    "first 100 bytes": lambda whole: whole[:100],
    "first half": lambda whole: whole[: len(whole) // 2],
    "garbage": lambda whole: np.random.default_rng(0).bytes(len(whole)),
}


@needs_gcc
@pytest.mark.parametrize("how", list(DAMAGES))
def test_a_damaged_library_is_compiled_again(built_cache, tmp_path, how):
    cache, name = built_cache
    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "cpu" / name
    whole = path.read_bytes()
    path.write_bytes(DAMAGES[how](whole))
    run = build_in_a_process(tmp_path)
    assert np.allclose(run["values"], WANT)
    (warning,) = run["warnings"]
    assert warning.startswith("CacheWarning") and str(path) in warning
    assert "compiled again" in warning
    assert damage(path) is None and len(path.read_bytes()) == len(whole)
    assert sorted(p.name for p in (tmp_path / "cpu").iterdir()) == sorted(
        p.name for p in (cache / "cpu").iterdir())  # nothing left over


@needs_gcc
def test_a_library_that_still_cannot_be_loaded_is_an_error(tmp_path, reread_environment,
                                                           monkeypatch):
    """Compiled afresh and refused by the loader: CompileError, and the file is removed."""
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiler, "_LOADED", {})

    def refuse(path):
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setattr(compiler.ctypes, "CDLL", refuse)
    with pytest.raises(compiler.CompileError, match="cannot load the compiled kernels"):
        compiler.load("int tg_refused_by_the_loader(void) { return 1; }\n")
    assert list((tmp_path / "cpu").glob("*.so")) == []


@needs_gcc
def test_damage_reads_the_elf_headers(built_cache, tmp_path):
    cache, name = built_cache
    whole = (cache / "cpu" / name).read_bytes()
    assert damage(cache / "cpu" / name) is None
    assert "not an ELF" in damage(Path(compiler.__file__))
    cut = tmp_path / "cut.so"
    for end in (10, 100, 1000, len(whole) // 2, len(whole) - 1):
        cut.write_bytes(whole[:end])
        assert "truncated" in damage(cut) or "not an ELF" in damage(cut), end


# stored programs ----------------------------------------------------------------------------


@pytest.fixture
def graph_cache(tmp_path, reread_environment):
    reread_environment.setenv("TEGRAD_GRAPH_CACHE", "1")
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    disk_cache.STATS.clear()
    return tmp_path


def softmax_gradient():
    x = tg.placeholder((4, 7), F64, "x")
    y = tg.nn.softmax(x, -1)
    head = tg.placeholder(y.shape, F64, "h")
    return x, y, head


def gradient_values(x, head, grads) -> np.ndarray:
    rng = np.random.default_rng(4)
    return tg.build([x, head], grads, target="numpy")(rng.standard_normal((4, 7)),
                                                     rng.standard_normal((4, 7)))[0]


@pytest.mark.parametrize("how", ["garbage", "first half"])
def test_a_damaged_stored_program_is_made_again(graph_cache, how):
    x, y, head = softmax_gradient()
    want = gradient_values(x, head, tg.gradient(y, [x], head=head))
    (path,) = (graph_cache / "graphs").glob("*.pkl")
    whole = path.read_bytes()
    path.write_bytes(b"not a pickle" if how == "garbage" else whole[: len(whole) // 2])
    disk_cache.STATS.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = tg.gradient(y, [x], head=head)
    (warning,) = caught
    assert warning.category is CacheWarning and str(path) in str(warning.message)
    assert disk_cache.STATS == {"gradient made": 1, "gradient stored": 1}
    np.testing.assert_array_equal(gradient_values(x, head, grads), want)
    assert len(path.read_bytes()) == len(whole)  # (its variables' uids differ)
    disk_cache.STATS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = tg.gradient(y, [x], head=head)
    assert disk_cache.STATS == {"gradient loaded": 1}
    np.testing.assert_array_equal(gradient_values(x, head, again), want)


def test_a_damaged_entry_whose_remake_is_not_stored_is_removed(graph_cache):
    def make():
        warnings.warn("generation noticed something", UserWarning, stacklevel=1)
        return [tg.placeholder((2,), F64, "p")]

    objects = ([tg.placeholder((3,), F64, "q")],)
    path = graph_cache / "graphs" / disk_cache.entry_name("test", serialize.key(objects)[0])
    path.parent.mkdir()
    path.write_bytes(b"garbage")
    with pytest.warns(UserWarning) as caught:
        disk_cache.remembered("test", objects, make)
    assert [w.category for w in caught] == [CacheWarning, UserWarning]
    assert not path.exists()


def test_a_result_whose_make_warned_about_the_cache_is_stored(graph_cache):
    """A ``CacheWarning`` is about the cache, not the result: the result is stored."""
    def make():
        warnings.warn("the cache noticed something", CacheWarning, stacklevel=1)
        return [tg.placeholder((2,), F64, "p")]

    with pytest.warns(CacheWarning, match="noticed something"):
        disk_cache.remembered("test", ([],), make)
    assert disk_cache.STATS == {"test made": 1, "test stored": 1}


# unusable directories -------------------------------------------------------------------------


def unusable_directory(how: str, tmp_path: Path) -> Path:
    if how == "under a file":
        (tmp_path / "file").write_text("a file, not a folder")
        return tmp_path / "file" / "cache"
    if how == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only directory")
        (tmp_path / "locked").mkdir(mode=0o500)
        return tmp_path / "locked"
    if not Path("/proc/self").exists():
        pytest.skip("no /proc")
    return Path("/proc/tegrad-cache-test")


@needs_gcc
@pytest.mark.parametrize("how", ["under a file", "read-only", "in /proc"])
def test_an_unusable_cache_directory_falls_back_to_a_temporary_one(
        tmp_path, reread_environment, monkeypatch, how):
    configured = unusable_directory(how, tmp_path)
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(configured))
    reread_environment.setenv("TEGRAD_GRAPH_CACHE", "1")
    monkeypatch.setattr(location, "_CHOSEN", {})
    monkeypatch.setattr(compiler, "_LOADED", {})  # the program's library is compiled here
    disk_cache.STATS.clear()
    x = tg.placeholder((4,), F64, "x")
    y = tg.compute((4,), lambda i: x[i] * 2.0, name="y")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = tg.build([x], [y], target="cpu")(np.arange(4.0))[0]
            second = tg.build([x], [y], target="cpu")(np.arange(4.0))[0]
        fallback = location.fallback()
        assert fallback is not None and fallback.name.startswith("tegrad-cache-")
        (warning,) = caught
        assert warning.category is CacheWarning
        assert str(configured) in str(warning.message) and str(fallback) in str(warning.message)
        np.testing.assert_array_equal(first, [0.0, 2.0, 4.0, 6.0])
        np.testing.assert_array_equal(second, first)
        assert list((fallback / "cpu").glob("*.so")) and list((fallback / "graphs").glob("*.pkl"))
        assert disk_cache.STATS["cpu stored"] == 1 and disk_cache.STATS["cpu loaded"] == 1
    finally:
        if location.fallback() is not None:
            shutil.rmtree(location.fallback(), ignore_errors=True)
        if how == "read-only":
            configured.chmod(0o700)


# processes at once ----------------------------------------------------------------------------


@needs_gcc
def test_processes_building_the_same_program_at_once(tmp_path):
    cache, signals = tmp_path / "cache", tmp_path / "signals"
    signals.mkdir()
    go = signals / "go"
    workers = [subprocess.Popen([sys.executable, "-c", BUILD, str(signals / f"ready{k}"),
                                 str(go)], env=environment(cache, graphs=True),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for k in range(4)]
    deadline = time.monotonic() + 120
    while len(list(signals.glob("ready*"))) < len(workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    runs = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, f"exit {worker.returncode}: {err[-3000:]}"
        runs.append(json.loads(out.strip().splitlines()[-1]))
    for run in runs:
        assert run["warnings"] == []
        np.testing.assert_allclose(run["values"], WANT)
    assert contents.survey(cache)[contents.OTHER].files == 0
    names = {p.name for p in (cache / "cpu").iterdir()}
    assert {run["library"] for run in runs} < names  # (and the helpers')
    # no build folder, failure or index entry being written left
    assert {Path(n).suffix for n in names} == {".so", ".kernel"}
    assert all(damage(cache / "cpu" / n) is None for n in names if n.endswith(".so"))
    for entry in (cache / "cpu").glob("*.kernel"):  # each names a whole library
        assert damage(cache / "cpu" / f"{entry.read_text().strip()}.so") is None
    assert [p.name.split("-")[0] for p in sorted((cache / "graphs").iterdir())] == [
        "cpu", "gradient"]  # no temporary .part file left


# tegrad cache ---------------------------------------------------------------------------------


def fill(root: Path) -> None:
    """Files as tegrad writes them, and two of the user's."""
    (root / "cpu" / ".build-abc").mkdir(parents=True)
    (root / "cpu" / ".build-abc" / "unit0.o").write_bytes(b"o" * 10)
    (root / "cpu" / f"{'a' * 32}.so").write_bytes(b"s" * 2000)
    (root / "cpu" / f"{'b' * 32}.failed.c").write_text("int main;")
    (root / "graphs").mkdir()
    (root / "graphs" / f"gradient-{'c' * 32}.pkl").write_bytes(b"p" * 300)
    (root / "graphs" / f".cpu-{'d' * 32}.pkl.x1y2.part").write_bytes(b"p" * 5)
    (root / "notes.txt").write_text("the user's")
    (root / "cpu" / "mine.c").write_text("the user's too")


def tegrad_cache(capsys, *argv: str) -> tuple[int, str]:
    status = main(["cache", *argv])
    return status, capsys.readouterr().out


def test_tegrad_cache_info_counts_by_part(tmp_path, reread_environment, capsys):
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    fill(tmp_path)
    for argv in ((), ("info",)):
        status, out = tegrad_cache(capsys, *argv)
        assert status == EXIT_OK
        lines = out.splitlines()
        assert str(tmp_path) in lines[0]
        assert any("cpu kernels" in line and " 3 files" in line and "cpu/" in line
                   for line in lines), out
        assert any("stored graphs" in line and " 2 files" in line for line in lines), out
        assert any("other files" in line and " 2 files" in line for line in lines), out
        assert any("total" in line and " 7 files" in line for line in lines), out


def test_tegrad_cache_info_on_an_unusable_directory(tmp_path, reread_environment, capsys):
    (tmp_path / "file").write_text("")
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path / "file" / "cache"))
    status, out = tegrad_cache(capsys)
    assert status == EXIT_OK and "cannot be used" in out and "tegrad-cache-" in out
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path / "new" / "cache"))
    status, out = tegrad_cache(capsys)
    assert status == EXIT_OK and "not made yet" in out
    assert not (tmp_path / "new").exists()  # looking made nothing


def test_tegrad_cache_clear_removes_only_its_own_files(tmp_path, reread_environment, capsys):
    reread_environment.setenv("TEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "cache"
    fill(root)
    status, out = tegrad_cache(capsys, "clear")
    assert status == EXIT_OK and "freed" in out and "kept" in out
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "cpu", "cpu/mine.c", "notes.txt"]
    (root / "notes.txt").unlink()
    (root / "cpu" / "mine.c").unlink()
    status, out = tegrad_cache(capsys, "clear")
    assert status == EXIT_OK and "nothing to clear" in out
    assert not root.exists()  # emptied: its folders and itself went


def test_tegrad_cache_usage_error(capsys):
    assert main(["cache", "everything"]) == EXIT_USAGE
    assert "invalid choice" in capsys.readouterr().err
