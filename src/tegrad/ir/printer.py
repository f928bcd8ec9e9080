"""Index-notation printing: every tensor a user or tegrad builds reads like math.

    C[i, j] = sum(A[i, k] * B[k, j], k in [0, 64))            # (32, 48) float32

Variables that share a name inside one definition get a numeric suffix (``k``, ``k.1``).
The nodes print through this module, which builds on theirs: it gives ``Expr`` its
``repr`` (``format_expr``) and ``Tensor`` its ``str`` (``format_program``), at its end.
"""

from __future__ import annotations

from .expr import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, Var
from .tensor import Compute, Placeholder, ScanOutput, Tensor
from .traverse import topo_tensors, walk

_INFIX = {
    "or": ("||", 1),
    "and": ("&&", 2),
    "lt": ("<", 3),
    "le": ("<=", 3),
    "eq": ("==", 3),
    "ne": ("!=", 3),
    "add": ("+", 4),
    "sub": ("-", 4),
    "mul": ("*", 5),
    "div": ("/", 5),
    "floordiv": ("//", 5),
    "floormod": ("%", 5),
    "pow": ("**", 7),
}


def format_expr(e: Expr, names: dict[Var, str] | None = None) -> str:
    return _Printer(names or {}).go(e, 0)


class _Printer:
    def __init__(self, names: dict[Var, str]):
        self.names = names

    def var(self, v: Var) -> str:
        return self.names.get(v, v.name)

    def go(self, e: Expr, outer: int) -> str:
        text, prec = self.node(e)
        return f"({text})" if prec < outer else text

    def node(self, e: Expr) -> tuple[str, int]:
        if isinstance(e, Var):
            return self.var(e), 9
        if isinstance(e, Const):
            if e.dtype == "bool":
                return ("true" if e.value else "false"), 9
            text = repr(e.value)
            return (text, 9) if not text.startswith("-") else (text, 6)
        if isinstance(e, Read):
            return f"{e.tensor.name}[{', '.join(self.go(i, 0) for i in e.indices)}]", 9
        if isinstance(e, Unary):
            if e.op == "neg":
                return "-" + self.go(e.a, 7), 6
            if e.op == "not":
                return "!" + self.go(e.a, 7), 6
            return f"{e.op}({self.go(e.a, 0)})", 9
        if isinstance(e, Cast):
            return f"{e.dtype}({self.go(e.a, 0)})", 9
        if isinstance(e, Binary):
            if e.op in ("max", "min"):
                return f"{e.op}({self.go(e.a, 0)}, {self.go(e.b, 0)})", 9
            sym, prec = _INFIX[e.op]
            right = prec + 1 if e.op != "pow" else prec
            left = prec if e.op != "pow" else prec + 1
            return f"{self.go(e.a, left)} {sym} {self.go(e.b, right)}", prec
        if isinstance(e, Select):
            return f"select({self.go(e.cond, 0)}, {self.go(e.a, 0)}, {self.go(e.b, 0)})", 9
        if isinstance(e, Reduce):
            axes = ", ".join(f"{self.var(v)} in [{v.lo}, {v.lo + v.extent})" for v in e.axes)
            where = "" if e.where is None else f", where {self.go(e.where, 0)}"
            name = e.combiner.name
            return f"{name}({self.go(e.source, 0)}, {axes}{where})", 9
        raise TypeError(f"cannot print {type(e).__name__}")


def _var_names(t: Compute) -> dict[Var, str]:
    seen: dict[Var, None] = dict.fromkeys(t.axes)
    for x in walk(t.body):
        if isinstance(x, Var):
            seen[x] = None
        elif isinstance(x, Reduce):
            seen.update(dict.fromkeys(x.axes))
    names: dict[Var, str] = {}
    used: dict[str, int] = {}
    for v in seen:
        n = used.get(v.name, 0)
        used[v.name] = n + 1
        names[v] = v.name if n == 0 else f"{v.name}.{n}"
    return names


def format_tensor(t: Tensor) -> str:
    if isinstance(t, Placeholder):
        return f"{t.name} = placeholder({t.shape}, {t.dtype})"
    if isinstance(t, ScanOutput):
        return _format_scan(t)
    assert isinstance(t, Compute)
    names = _var_names(t)
    lhs = f"{t.name}[{', '.join(names[a] for a in t.axes)}]" if t.axes else t.name
    return f"{lhs} = {format_expr(t.body, names)}    # {t.shape} {t.dtype}"


def format_program(outputs: list[Tensor]) -> str:
    return "\n".join(format_tensor(t) for t in topo_tensors(outputs))


def _format_scan(t) -> str:
    """A scan prints its body computes (indented) and the recurrence it defines."""
    op = t.op
    if t.index != 0:
        return f"{t.name} = state {t.index} of {op.outputs[0].name}    # {t.shape} {t.dtype}"
    states = ", ".join(s.name for s in op.states)
    lines = [f"{t.name} = scan(states [{states}], first {op.init_rows} row(s) from "
             f"[{', '.join(i.name for i in op.inits)}], then for t in [{op.init_rows}, "
             f"{op.length}):"]
    if getattr(op, "checkpoint", None):
        lines[0] = lines[0][:-1] + f" (checkpoint every {op.checkpoint} steps):"
    lines += ["    " + format_tensor(c) for c in op.body]
    updates = ", ".join(f"{s.name}[t] = {u.name}[t]" for s, u in zip(op.states, op.updates,
                                                                     strict=True))
    lines.append(f"    {updates})    # {t.shape} {t.dtype}")
    return "\n".join(lines)


def _expr_repr(e: Expr) -> str:
    return format_expr(e)


def _tensor_str(t: Tensor) -> str:
    return format_program([t])


_expr_repr.__name__, _expr_repr.__qualname__ = "__repr__", "Expr.__repr__"
_tensor_str.__name__, _tensor_str.__qualname__ = "__str__", "Tensor.__str__"
Expr.__repr__ = _expr_repr
Tensor.__str__ = _tensor_str
