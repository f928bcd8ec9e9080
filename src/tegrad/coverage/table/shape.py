"""Cases: shape ops (``tg.nn.reshape``, ``cat``, ``pad``, ``roll``...) against torch."""

from __future__ import annotations

from ..cases import case, normal


def _method(name: str, *args):
    """``tensor.<name>(*args)``: torch methods with no function form (view, expand, repeat)."""
    def call(a):
        return getattr(a, name)(*args)
    return call


def _nn(name: str, *args):
    """``tg.nn.<name>(a, *args)``, for ops whose sizes are positional varargs."""
    def call(a):
        from ... import nn
        return getattr(nn, name)(a, *args)
    return call


def _list_op(name: str, torch_name: str):
    """``op([t_0, t_1, ...], **kw)`` on both sides: cat, concat, stack."""
    def tegrad_call(*ts, **kw):
        from ... import nn
        return getattr(nn, name)(list(ts), **kw)

    def torch_call(*ts, **kw):
        import torch
        return getattr(torch, torch_name)(ts, **kw)
    return tegrad_call, torch_call


S = "shape"
BIG = normal((8, 64, 56, 56))

# views
case("reshape", "merge and split, -1", normal((2, 3, 4)), kwargs=dict(shape=(4, -1)),
     ref="torch.reshape", category=S, bench=normal((64, 1024, 16)))
case("reshape", "size-1 axes", normal((3, 1, 8)), kwargs=dict(shape=(3, 2, 4, 1)),
     ref="torch.reshape", category=S)
case("reshape", "to 1-D", normal((3, 5)), kwargs=dict(shape=(-1,)), ref="torch.reshape",
     category=S)
case("view", "", normal((2, 3, 4)), fn=_nn("view", 6, 4), ref=_method("view", 6, 4),
     category=S)
case("flatten", "dims 1..2", normal((2, 3, 4, 5)), kwargs=dict(start_dim=1, end_dim=2),
     ref="torch.flatten", category=S, bench=BIG)
case("flatten", "all", normal((2, 3, 4)), ref="torch.flatten", category=S)
case("squeeze", "all", normal((3, 1, 4, 1)), ref="torch.squeeze", category=S)
case("squeeze", "dim 1", normal((3, 1, 4, 1)), kwargs=dict(dim=1), ref="torch.squeeze",
     category=S)
case("squeeze", "dims (0, 3), 0 not size 1", normal((3, 1, 4, 1)), kwargs=dict(dim=(0, 3)),
     ref="torch.squeeze", category=S)
case("unsqueeze", "dim -1", normal((3, 4)), kwargs=dict(dim=-1), ref="torch.unsqueeze",
     category=S)
case("unsqueeze", "dim 1", normal((3, 4)), kwargs=dict(dim=1), ref="torch.unsqueeze",
     category=S)
case("transpose", "dims 0, 2", normal((3, 4, 5)), kwargs=dict(dim0=0, dim1=2),
     ref="torch.transpose", category=S)
case("transpose", "2-D", normal((5, 7)), kwargs=dict(dim0=0, dim1=1), ref="torch.transpose",
     category=S, bench=normal((4096, 1024)))
case("permute", "", normal((2, 3, 4, 5)), kwargs=dict(dims=(2, 0, 3, 1)), ref="torch.permute",
     category=S, bench=BIG)
for op in ("moveaxis", "movedim"):
    case(op, "", normal((2, 3, 4)), kwargs=dict(source=0, destination=-1), ref=f"torch.{op}",
         category=S)
case("expand", "new axis, -1, size 1", normal((3, 1)), fn=_nn("expand", 2, -1, 4),
     ref=_method("expand", 2, -1, 4), category=S)
case("expand", "rows", normal((1, 5)), fn=_nn("expand", 512, -1),
     ref=_method("expand", 512, -1), category=S, bench=normal((1, 2048)))
case("broadcast_to", "", normal((3, 1)), kwargs=dict(size=(2, 3, 4)),
     ref="torch.broadcast_to", category=S)

# joins and splits
_cat, _torch_cat = _list_op("cat", "cat")
case("cat", "dim 1, three", normal((2, 3, 4), (2, 1, 4), (2, 5, 4)), kwargs=dict(dim=1),
     fn=_cat, ref=_torch_cat, category=S, bench=normal((4096, 512), (4096, 512)))
case("cat", "dim -1", normal((2, 3), (2, 2)), kwargs=dict(dim=-1), fn=_cat, ref=_torch_cat,
     category=S)
case("cat", "dim 0, bench", normal((3, 4), (1, 4)), fn=_cat, ref=_torch_cat, category=S,
     bench=normal((2048, 1024), (2048, 1024)))
_concat, _torch_concat = _list_op("concat", "concat")
case("concat", "", normal((2, 3), (4, 3)), fn=_concat, ref=_torch_concat, category=S)
_stack, _torch_stack = _list_op("stack", "stack")
case("stack", "dim 1", normal((2, 3), (2, 3), (2, 3)), kwargs=dict(dim=1), fn=_stack,
     ref=_torch_stack, category=S, bench=normal((1024, 1024), (1024, 1024)))
case("stack", "dim -1", normal((4,), (4,)), kwargs=dict(dim=-1), fn=_stack, ref=_torch_stack,
     category=S)
case("split", "size 2, ragged", normal((3, 5, 2)), kwargs=dict(split_size_or_sections=2, dim=1),
     ref="torch.split", category=S, bench=normal((1024, 5, 512)))
case("split", "sections", normal((3, 5)), kwargs=dict(split_size_or_sections=[1, 3, 1], dim=1),
     ref="torch.split", category=S)
case("chunk", "3 of 7", normal((7, 2)), kwargs=dict(chunks=3), ref="torch.chunk", category=S)
case("chunk", "4 of 6 gives 3", normal((2, 6)), kwargs=dict(chunks=4, dim=1), ref="torch.chunk",
     category=S)
case("narrow", "", normal((3, 5)), kwargs=dict(dim=1, start=1, length=3), ref="torch.narrow",
     category=S)
case("narrow", "negative start", normal((6, 2)), kwargs=dict(dim=0, start=-4, length=2),
     ref="torch.narrow", category=S)
case("slice_copy", "step 2", normal((9, 4)), kwargs=dict(dim=0, start=1, end=8, step=2),
     ref="torch.slice_copy", category=S, bench=normal((4096, 1024)))
case("slice_copy", "step 3, negative end", normal((2, 10)), kwargs=dict(dim=-1, start=0, end=-1,
                                                                   step=3),
     ref="torch.slice_copy", category=S)

# movement
case("flip", "dims 0, 2", normal((3, 4, 5)), kwargs=dict(dims=(0, 2)), ref="torch.flip",
     category=S, bench=BIG)
case("flip", "size-1 axis", normal((1, 4)), kwargs=dict(dims=(0, 1)), ref="torch.flip",
     category=S)
case("roll", "two dims", normal((3, 4, 5)), kwargs=dict(shifts=(1, -2), dims=(0, 2)),
     ref="torch.roll", category=S, bench=BIG)
case("roll", "flattened", normal((3, 4)), kwargs=dict(shifts=5), ref="torch.roll", category=S)
case("roll", "shift > size", normal((2, 4)), kwargs=dict(shifts=7, dims=1), ref="torch.roll",
     category=S)
case("repeat", "extra leading axis", normal((3, 4)), fn=_nn("repeat", 2, 1, 3),
     ref=_method("repeat", 2, 1, 3), category=S)
case("repeat", "size-1 axis", normal((1, 3)), fn=_nn("repeat", 4, 2), ref=_method("repeat", 4, 2),
     category=S)
case("tile", "fewer dims", normal((3, 4)), kwargs=dict(dims=(2,)), ref="torch.tile", category=S,
     bench=normal((512, 1024)))

# padding (torch's order: last axis first)
case("pad", "constant", normal((2, 3, 4, 5)), kwargs=dict(pad=(1, 2, 2, 1), value=0.5),
     category=S, bench=BIG)
case("pad", "constant, crop", normal((3, 6)), kwargs=dict(pad=(-1, 2)), category=S)
case("pad", "constant, 3 axes", normal((2, 2, 3)), kwargs=dict(pad=(1, 0, 0, 2, 1, 1)),
     category=S)
case("pad", "circular", normal((1, 2, 3, 4)), kwargs=dict(pad=(1, 2, 2, 1), mode="circular"),
     category=S, bench=BIG)
case("pad", "circular, pad = size", normal((2, 3, 3)), kwargs=dict(pad=(3, 3), mode="circular"),
     category=S)
case("pad", "circular, crop", normal((1, 2, 4, 5)),
     kwargs=dict(pad=(-1, 2, 2, -1), mode="circular"), category=S)
case("pad", "reflect", normal((1, 2, 4, 5)), kwargs=dict(pad=(2, 2, 1, 3), mode="reflect"),
     category=S, bench=BIG)
case("pad", "reflect 1-D", normal((2, 3, 6)), kwargs=dict(pad=(5, 1), mode="reflect"), category=S)
case("pad", "replicate", normal((1, 2, 3, 4)), kwargs=dict(pad=(1, 2, 3, 0), mode="replicate"),
     category=S, bench=BIG)
case("pad", "replicate 3-D", normal((1, 1, 2, 3, 4)),
     kwargs=dict(pad=(1, 1, 2, 2, 1, 1), mode="replicate"), category=S)
