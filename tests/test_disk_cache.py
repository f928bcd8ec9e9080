"""The disk cache of generated programs (``cache/disk.py``, ``cache/serialize.py``).

- Every op of the op table: its gradients, stored and loaded against the same forward, print
  as the generated ones and give the same values. The cpu blueprint of the forward and
  gradients loads with the same kernels and C and gives the same values.
- A second process that asks for an LSTM's and a strided conv's gradients and builds them
  loads everything and generates nothing. Its results are bitwise those of the first.
- Keys describe the structure up to uids: sharing, shapes, dtypes and names count. Loaded
  variables keep their uids' order.
- Not stored: results whose generation warned. With the cache off, nothing is written.
  (Damaged entries and unusable directories: ``test_cache_healing.py``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import tegrad as tg
from tegrad.backends.cpu import compiler
from tegrad.cache import disk as disk_cache
from tegrad.cache import serialize
from tegrad.ir.expr import Var
from tegrad.ir.printer import format_program
from tegrad.ir.scan import STEP_VALUES
from tegrad.ir.tensor import ScanOutput
from tegrad.ir.traverse import topo_tensors, walk

try:
    from .optable import SPECS
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from optable import SPECS

F64 = "float64"


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The graph cache on, in a new directory (the compiled kernels' too)."""
    monkeypatch.setenv("TEGRAD_GRAPH_CACHE", "1")
    monkeypatch.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    disk_cache.STATS.clear()
    return tmp_path


def entries(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "graphs").glob("*.pkl"))


def round_trip(objects, anchors_of):
    """``objects`` stored against the anchors of ``anchors_of`` and loaded back."""
    _, anchors = serialize.key(anchors_of)
    return serialize.load(serialize.store(objects, anchors), anchors)


def op_case(spec):
    inputs, out = spec.build()
    diff = [inputs[k] for k in spec.diff]
    head = tg.placeholder(out.shape, out.dtype, name="H")
    rng = np.random.default_rng(7)
    arrays = [*spec.make_inputs(rng), rng.standard_normal(out.shape).astype(out.dtype)]
    return inputs, out, diff, head, arrays


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_op_table_gradients_round_trip(spec):
    inputs, out, diff, head, arrays = op_case(spec)
    grads = tg.gradient(out, diff, head=head)
    loaded = round_trip(grads, (out, diff, head))
    assert format_program(loaded) == format_program(grads)
    forward, made = set(topo_tensors([out, head])), set(topo_tensors(grads))
    got = set(topo_tensors(loaded))
    assert got & forward == made & forward, "the forward's own tensors are read, not copies"
    # a loaded program keys as the generated one: a warm process's build finds its entry
    ins = [*inputs, head]
    assert serialize.key((ins, [out, *loaded]))[0] == serialize.key((ins, [out, *grads]))[0]
    want = tg.build(ins, [out, *grads], target="numpy")(*arrays)
    for g, w in zip(tg.build(ins, [out, *loaded], target="numpy")(*arrays), want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_op_table_cpu_blueprints_round_trip(spec):
    from tegrad.backends.cpu.program import CpuProgram, blueprint
    from tegrad.lower.plan import plan

    inputs, out, diff, head, arrays = op_case(spec)
    ins, outs = [*inputs, head], [out, *tg.gradient(out, diff, head=head)]
    made = blueprint(plan(outs))
    loaded = round_trip(made, (ins, outs))
    assert [k.text for k in loaded.texts()] == [k.text for k in made.texts()]
    assert loaded.plan.describe() == made.plan.describe()
    feed = dict(zip(ins, arrays, strict=True))
    want = CpuProgram(made, ins).run(feed)
    for g, w in zip(CpuProgram(loaded, ins).run(feed), want, strict=True):
        np.testing.assert_array_equal(g, w)


SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import tegrad as tg
    from tegrad.autodiff import reverse
    from tegrad.cache import disk as disk_cache
    from tegrad.lower import plan

    def fail(*args, **kwargs):
        raise AssertionError("the warm process differentiated or planned")

    if sys.argv[1] == "warm":
        reverse.gradient = plan.plan = fail
    ph = lambda shape, name: tg.placeholder(shape, "float32", name)
    x, h0, c0 = ph((6, 3, 5), "x"), ph((3, 4), "h0"), ph((3, 4), "c0")
    wih, whh, bih, bhh = ph((16, 5), "wih"), ph((16, 4), "whh"), ph((16,), "bih"), ph(
        (16,), "bhh")
    lstm = tg.nn.lstm(x, h0, c0, wih, whh, bih, bhh)[0]
    img, w = ph((2, 3, 9, 9), "img"), ph((4, 3, 3, 3), "w")
    conv = tg.nn.conv2d(img, w, stride=2, padding=1)
    digest = hashlib.sha256()
    rng = np.random.default_rng(0)
    for out, ins in ((lstm, [x, h0, c0, wih, whh, bih, bhh]), (conv, [img, w])):
        head = ph(out.shape, "head")
        f = tg.build([*ins, head], [out, *tg.gradient(out, ins, head=head)], target="cpu")
        arrays = [rng.standard_normal(p.shape).astype("float32") for p in [*ins, head]]
        for r in f(*arrays):
            digest.update(np.ascontiguousarray(r).tobytes())
    print(json.dumps({"digest": digest.hexdigest(), "stats": dict(disk_cache.STATS)}))
""")


@pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
def test_second_process_loads_instead_of_generating(tmp_path):
    import json

    env = {**os.environ, "TEGRAD_GRAPH_CACHE": "1", "TEGRAD_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = []
    for phase in ("cold", "warm"):
        done = subprocess.run([sys.executable, "-c", SCRIPT, phase], env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["stats"] == {"gradient made": 2, "gradient stored": 2, "cpu made": 2,
                              "cpu stored": 2}
    assert second["stats"] == {"gradient loaded": 2, "cpu loaded": 2}
    assert second["digest"] == first["digest"]


# keys ----------------------------------------------------------------------------------------


def test_equal_structures_have_equal_keys_and_sharing_counts():
    def program(shared: bool, shape=(3, 4), dtype=F64, name="A"):
        a = tg.placeholder(shape, dtype, name)
        b = a if shared else tg.placeholder(shape, dtype, name)
        return tg.compute(shape, lambda i, j: a[i, j] * b[i, j] + 1.0, name="C")

    key = lambda t: serialize.key([t])[0]  # noqa: E731
    assert key(program(True)) == key(program(True))
    assert key(program(False)) == key(program(False))
    assert key(program(True)) != key(program(False))  # A*A is not A*B
    assert key(program(True)) != key(program(True, shape=(3, 5)))
    assert key(program(True)) != key(program(True, dtype="float32"))
    assert key(program(True)) != key(program(True, name="B"))


def test_loaded_variables_keep_their_order_and_are_new():
    x = tg.placeholder((5, 6), F64, "x")
    y = tg.nn.softmax(x, -1)
    head = tg.placeholder(y.shape, F64, "h")
    grads = tg.gradient(y, [x], head=head)
    loaded = round_trip(grads, (y, [x], head))

    def variables(ts):
        seen: dict = {}
        for t in topo_tensors(ts):
            if t in (x, head) or t in topo_tensors([y]):
                continue
            for v in (*t.axes, *walk(t.body)):
                if isinstance(v, Var):
                    seen.setdefault(v, None)
        return list(seen)

    before, after = variables(grads), variables(loaded)
    assert len(before) == len(after) > 0
    assert not set(before) & set(after)
    order = lambda vs: sorted(range(len(vs)), key=lambda n: vs[n].uid)  # noqa: E731
    assert order(before) == order(after)


def test_scan_gradients_keep_their_step_values():
    x = tg.placeholder((5, 2, 3), F64, "x")
    h0, c0 = tg.placeholder((2, 4), F64, "h0"), tg.placeholder((2, 4), F64, "c0")
    w = [tg.placeholder(s, F64, n) for n, s in (("wih", (16, 3)), ("whh", (16, 4)))]
    out = tg.nn.lstm(x, h0, c0, *w)[0]
    head = tg.placeholder(out.shape, F64, "h")
    grads = tg.gradient(out, [x, *w], head=head)
    loaded = round_trip(grads, (out, [x, *w], head))
    kept = [t for t in topo_tensors(grads) if t in STEP_VALUES]
    back = [t for t in topo_tensors(loaded) if t in STEP_VALUES]
    assert kept and len(back) == len(kept)
    (forward_op,) = {t.op for t in topo_tensors([out]) if isinstance(t, ScanOutput)}
    loaded_ops = {t.op for t in topo_tensors(loaded) if isinstance(t, ScanOutput)}
    for t, u in zip(kept, back, strict=True):
        (op, x, flip), (op2, x2, flip2) = STEP_VALUES[t], STEP_VALUES[u]
        assert flip2 == flip
        if op is forward_op:  # the forward scan's own step compute (an anchor), not a copy
            assert op2 is op and x2 is x
        else:  # the adjoint's: the loaded adjoint scan's step compute
            assert op2 in loaded_ops and op2 is not op and x2 in op2.step().computes.values()
    assert {STEP_VALUES[t][0] is forward_op for t in kept} == {True, False}


# the cache -----------------------------------------------------------------------------------


def softmax_gradient():
    x = tg.placeholder((4, 7), F64, "x")
    y = tg.nn.softmax(x, -1)
    head = tg.placeholder(y.shape, F64, "h")
    return x, y, head


def test_a_custom_reducer_is_stored(cache_on):
    x = tg.placeholder((3, 5), F64, "x")
    prod = tg.comm_reducer(lambda a, b: a * b, lambda dtype: tg.const(1, dtype), "myprod")
    k = tg.reduce_axis(5, "k")
    y = tg.compute((3,), lambda i: prod(x[i, k] + 2.0, axis=k), name="y")
    head = tg.placeholder((3,), F64, "h")
    grads = tg.gradient(y, [x], head=head)
    assert disk_cache.STATS == {"gradient made": 1, "gradient stored": 1}
    loaded = round_trip(grads, (y, [x], head))
    arrays = [np.random.default_rng(1).uniform(0.5, 1.5, (3, 5)), np.ones(3)]
    np.testing.assert_array_equal(tg.build([x, head], loaded, target="numpy")(*arrays),
                                  tg.build([x, head], grads, target="numpy")(*arrays))


def test_a_result_that_warned_is_not_stored(cache_on):
    def make():
        warnings.warn("generation noticed something", UserWarning, stacklevel=1)
        return [tg.placeholder((2,), F64, "p")]

    with pytest.warns(UserWarning, match="noticed something"):
        disk_cache.remembered("test", ([],), make)
    assert entries(cache_on) == []
    assert disk_cache.STATS == {"test made": 1}


def test_off_switch(cache_on, monkeypatch):
    monkeypatch.setenv("TEGRAD_GRAPH_CACHE", "0")
    x, y, head = softmax_gradient()
    tg.build([x, head], tg.gradient(y, [x], head=head), target="numpy")
    assert entries(cache_on) == [] and not disk_cache.STATS


def test_gradient_and_cpu_entries_are_written_and_read(cache_on):
    x, y, head = softmax_gradient()
    grads = tg.gradient(y, [x], head=head)
    arrays = [np.random.default_rng(2).standard_normal((4, 7)) for _ in range(2)]
    if compiler.compiler() is None:
        pytest.skip("no C compiler")
    want = tg.build([x, head], grads, target="cpu")(*arrays)
    names = entries(cache_on)
    assert [n.split("-")[0] for n in names] == ["cpu", "gradient"]
    got = tg.build([x, head], tg.gradient(y, [x], head=head), target="cpu")(*arrays)
    np.testing.assert_array_equal(got, want)
    assert disk_cache.STATS["gradient loaded"] == 1 and disk_cache.STATS["cpu loaded"] == 1
    assert entries(cache_on) == names


@pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
def test_build_vjp_loads_its_two_programs(cache_on):
    x = tg.placeholder((5, 2, 3), F64, "x")
    h0, c0 = tg.placeholder((2, 4), F64, "h0"), tg.placeholder((2, 4), F64, "c0")
    w = [tg.placeholder(s, F64, n) for n, s in (("wih", (16, 3)), ("whh", (16, 4)))]
    out = tg.nn.lstm(x, h0, c0, *w)[0]
    ins = [x, h0, c0, *w]
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(p.shape) for p in ins]
    head = rng.standard_normal(out.shape)
    runs = []
    for _ in range(2):
        forward, backward = tg.build_vjp(ins, out, target="cpu")
        y, saved = forward(*arrays)
        runs.append((y, saved.names, backward(saved, head)))
    assert disk_cache.STATS["cpu made"] == 1 and disk_cache.STATS["cpu loaded"] == 1
    (y0, names0, grads0), (y1, names1, grads1) = runs
    np.testing.assert_array_equal(y1, y0)
    assert names1 == names0 and "lstm" in " ".join(names0)
    for g1, g0 in zip(grads1, grads0, strict=True):
        np.testing.assert_array_equal(g1, g0)


def test_a_deep_chain_of_tensors_is_stored(cache_on):
    """Pickle recurses through what it writes; tensors go out inputs first, so a chain of
    hundreds of computes (a ResNet's) does not exceed the recursion limit."""
    x = tg.placeholder((3,), F64, "x")
    t = x
    for n in range(1500):
        t = tg.compute((3,), lambda i, t=t: tg.sin(t[i]) * 0.5, name=f"c{n}")
    head = tg.placeholder((3,), F64, "h")
    grads = tg.gradient(t, [x], head=head)
    assert disk_cache.STATS == {"gradient made": 1, "gradient stored": 1}
    loaded = round_trip(grads, (t, [x], head))
    arrays = [np.linspace(0.1, 0.3, 3), np.ones(3)]
    np.testing.assert_array_equal(tg.build([x, head], loaded, target="numpy")(*arrays),
                                  tg.build([x, head], grads, target="numpy")(*arrays))


@pytest.mark.skipif(compiler.compiler() is None, reason="no C compiler")
def test_a_stored_program_is_keyed_by_its_options(cache_on):
    """A setting that shapes generation (which step values a scan keeps for its backward)
    is part of the key: a build under other options makes its own program (and gets that
    setting's plan), a build under the same options loads it."""
    x = tg.placeholder((5, 2, 3), F64, "x")
    h0, c0 = tg.placeholder((2, 4), F64, "h0"), tg.placeholder((2, 4), F64, "c0")
    w = [tg.placeholder(s, F64, n) for n, s in (("wih", (16, 3)), ("whh", (16, 4)))]
    out = tg.nn.lstm(x, h0, c0, *w)[0]
    head = tg.placeholder(out.shape, F64, "H")
    ins = [x, h0, c0, *w, head]
    outputs = [out, *tg.gradient(out, [x, h0, c0, *w], head=head)]
    base = tg.Options.from_environment()
    products_only = base.replace(keep_step_kernels=False)

    def kept(options):
        f = tg.build(ins, outputs, target="cpu", options=options)
        return sum(len(k.saved) for k in f.program.plan.kernels if k.kind == "scan")

    every, fewer = kept(base), kept(products_only)
    assert every > fewer  # (not the stored plan of the default options)
    assert disk_cache.STATS["cpu made"] == 2 and not disk_cache.STATS["cpu loaded"]
    assert kept(products_only) == fewer and kept(base) == every
    assert disk_cache.STATS["cpu made"] == 2 and disk_cache.STATS["cpu loaded"] == 2
