"""TVM ``te`` graphs in and out: ``from_tvm`` reads, ``to_tvm`` writes.

TVM removed its tensor-expression autodiff (``te.gradient``) in v0.20. These two calls
give it back: read a forward written with ``te.compute``, differentiate it with tegrad,
write the generated backward as ``te.compute`` again, and build it with TVM.

    X = te.placeholder((8, 16), "float32", name="X")
    W = te.placeholder((16, 4), "float32", name="W")
    k = te.reduce_axis((0, 16), name="k")
    Y = te.compute((8, 4), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="Y")

    y, feeds = tg.from_tvm(Y)                  # tegrad tensor, {X: X', W: W'}
    H = tg.placeholder(y.shape, y.dtype, name="H")
    dX, dW = tg.gradient(y, [feeds[X], feeds[W]], head=H)
    (tdX, tdW), params = tg.to_tvm([dX, dW])   # TVM tensors, TVM placeholders
    mod = tvm.compile(te.create_prim_func([*params, tdX, tdW]), target="llvm")

``from_tvm`` lives in ``tvm_read.py``, ``to_tvm`` in ``tvm_write.py`` (with the hoisting
of nested reductions in ``tvm_hoist.py``). ``build_tvm`` wraps create_prim_func, compile
and the call on NumPy arrays. TVM is imported on the first call, never by
``import tegrad``. Written against apache-tvm 0.27, where ``tvm.tir`` became
``tvm.tirx``; older releases (``tvm.tir``) are accepted where the spelling is all that
changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .tvm_ops import load_tvm  # (``load_tvm`` is also imported from here)


def from_tvm(tensors):
    """Read TVM ``te`` tensors (one or a list) as tegrad tensors.

    Returns ``(tensors, feeds)``: tegrad tensor(s) with the same names, shapes and
    dtypes (one tensor for one, a list for a list), and a dict from each TVM placeholder
    the graph reads to its tegrad placeholder. An unsupported construct raises
    ``NotImplementedError`` naming it and the tensor it is in."""
    from .tvm_read import read_graph

    return read_graph(tensors)


def to_tvm(tensors, inputs: Sequence | None = None):
    """Write tegrad tensors (one or a list; a forward or a generated backward) as TVM
    ``te.compute`` graphs.

    Returns ``(outputs, params)``: the TVM tensor(s) (one for one, a list for a list) and
    the TVM placeholders, one per tegrad placeholder: in the order of ``inputs`` when
    given (it must name every placeholder the tensors read), else in order of first use.
    ``te.create_prim_func([*params, *outputs])`` makes the function."""
    from .tvm_write import write_graph

    return write_graph(tensors, inputs)


def build_tvm(tensors, inputs: Sequence | None = None, target="llvm"):
    """``to_tvm``, ``te.create_prim_func`` and ``tvm.compile`` in one call: returns
    ``f(*arrays)`` taking NumPy arrays (one per placeholder, in ``inputs`` order) and
    returning one array (for one tensor) or a tuple. ``f.prim_func`` is the PrimFunc,
    ``f.params`` the TVM placeholders. The PrimFunc is unscheduled (one loop nest per
    compute), which CPU targets (``"llvm"``) build as is; a GPU target needs a schedule
    (thread bindings) applied to ``f.prim_func`` first."""
    m = load_tvm()
    single = not isinstance(tensors, (list, tuple))
    outs, params = to_tvm(tensors, inputs)
    outs = [outs] if single else list(outs)
    prim = m.te.create_prim_func([*params, *outs])
    mod = m.tvm.compile(prim, target=target)
    dev = m.tvm.device_from_target(m.tvm.target.Target(target))
    shapes = [(tuple(int(s) for s in t.shape), str(t.dtype)) for t in outs]
    arg_specs = [(tuple(int(s) for s in p.shape), str(p.dtype), p.name) for p in params]

    def run(*arrays):
        if len(arrays) != len(arg_specs):
            names = ", ".join(n for _, _, n in arg_specs)
            raise TypeError(f"expected {len(arg_specs)} arrays ({names}), got {len(arrays)}")
        args = []
        for a, (shape, dtype, name) in zip(arrays, arg_specs, strict=True):
            a = np.asarray(a)
            if a.shape != shape or str(a.dtype) != dtype:
                raise ValueError(
                    f"{name}: expected shape {shape} {dtype}, got {a.shape} {a.dtype}"
                )
            a = a if a.flags.c_contiguous else a.copy()  # ascontiguousarray makes 0-d 1-d
            args.append(m.tvm.runtime.tensor(a, dev))
        results = [m.tvm.runtime.empty(shape, dtype, dev) for shape, dtype in shapes]
        mod(*args, *results)
        values = tuple(r.numpy() for r in results)
        return values[0] if single else values

    run.prim_func = prim
    run.params = params
    run.module = mod
    return run
