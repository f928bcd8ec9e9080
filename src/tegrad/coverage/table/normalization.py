"""Cases: normalization layers (``tg.nn.batch_norm``... ``normalize``) against torch.

Running statistics are buffers in torch, never differentiated: ``diff=`` leaves them out.
Arguments after a non-tensor one (``layer_norm``'s ``weight`` after ``normalized_shape``)
are passed by name through ``_call``.
"""

from __future__ import annotations

from ..cases import case, join, normal, uniform


def _call(op: str, *slots) -> dict:
    """``fn``/``ref`` calling ``op`` with the case's arrays placed by ``slots``: an int
    is a positional array, ``None`` a positional ``None``, a string a keyword array
    (``_call("layer_norm", 0, "weight", "bias")``)."""
    def arguments(arrays):
        positional, named, k = [], {}, 0
        for slot in slots:
            if slot is None:
                positional.append(None)
                continue
            if isinstance(slot, str):
                named[slot] = arrays[k]
            else:
                positional.append(arrays[k])
            k += 1
        return positional, named

    def fn(*arrays, **kwargs):
        from ... import nn

        positional, named = arguments(arrays)
        return getattr(nn, op)(*positional, **named, **kwargs)

    def ref(*arrays, **kwargs):
        import torch.nn.functional as F

        positional, named = arguments(arrays)
        return getattr(F, op)(*positional, **named, **kwargs)

    return dict(fn=fn, ref=ref)


def _running_stats_ref(x, running_mean, running_var, momentum=0.1):
    """The running stats torch's ``batch_norm(training=True)`` updates in place."""
    import torch.nn.functional as F

    running_mean, running_var = running_mean.clone(), running_var.clone()
    F.batch_norm(x, running_mean, running_var, training=True, momentum=momentum)
    return running_mean, running_var


def _norm(op, label, inputs, **options):
    case(op, label, inputs, category="normalization", **options)


def _bn_inputs(shape):
    """input, running_mean, running_var, weight, bias."""
    c = (shape[1],)
    return join(normal(shape), normal(c), uniform(c), normal(c), normal(c))


IMAGE = (8, 64, 56, 56)
ROWS = (4096, 1024)

# batch_norm: positional (input, running_mean, running_var, weight, bias); the running
# stats (1, 2) are buffers
_norm("batch_norm", "eval", _bn_inputs((2, 3, 4, 4)), diff=(0, 3, 4),
      bench=_bn_inputs(IMAGE))
_norm("batch_norm", "training", _bn_inputs((2, 3, 4, 4)), kwargs=dict(training=True),
      diff=(0, 3, 4), bench=_bn_inputs(IMAGE))
_norm("batch_norm", "training, (N, C, L), no running stats", normal((3, 4, 5), (4,), (4,)),
      kwargs=dict(training=True, eps=1e-3), **_call("batch_norm", 0, None, None, 1, 2))
_norm("batch_norm", "eval, (N, C), no affine", join(normal((5, 3)), normal((3,)),
                                                    uniform((3,))), diff=(0,))
_norm("batch_norm", "training, (N, C), no affine", normal((5, 3)),
      kwargs=dict(training=True), **_call("batch_norm", 0, None, None))
_norm("batch_norm_running_stats", "", join(normal((4, 3, 2, 2)), normal((3,)), uniform((3,))),
      kwargs=dict(momentum=0.3), ref=_running_stats_ref, diff=())

_norm("layer_norm", "last dim", normal((3, 1024), (1024,), (1024,)),
      kwargs=dict(normalized_shape=(1024,)), **_call("layer_norm", 0, "weight", "bias"),
      bench=normal(ROWS, ROWS[1:], ROWS[1:]))
_norm("layer_norm", "two dims, eps", normal((2, 3, 4, 5), (4, 5), (4, 5)),
      kwargs=dict(normalized_shape=(4, 5), eps=1e-3), **_call("layer_norm", 0, "weight", "bias"))
_norm("layer_norm", "list shape, no affine", normal((3, 5)), kwargs=dict(normalized_shape=[5]))

_norm("group_norm", "3 groups", normal((2, 6, 3, 3), (6,), (6,)), kwargs=dict(num_groups=3),
      **_call("group_norm", 0, "weight", "bias"))
_norm("group_norm", "32 groups", normal((2, 64, 2, 2), (64,), (64,)),
      kwargs=dict(num_groups=32), **_call("group_norm", 0, "weight", "bias"),
      bench=normal(IMAGE, IMAGE[1:2], IMAGE[1:2]))
_norm("group_norm", "1 group, (N, C, L)", normal((2, 4, 5), (4,), (4,)),
      kwargs=dict(num_groups=1, eps=1e-3), **_call("group_norm", 0, "weight", "bias"))
_norm("group_norm", "group per channel, no affine", normal((2, 4, 3, 2)),
      kwargs=dict(num_groups=4))

_norm("instance_norm", "input stats", normal((2, 3, 4, 4), (3,), (3,)),
      **_call("instance_norm", 0, "weight", "bias"),
      bench=normal(IMAGE, IMAGE[1:2], IMAGE[1:2]))
_norm("instance_norm", "(N, C, L), no affine", normal((2, 3, 5)), kwargs=dict(eps=1e-3))
_norm("instance_norm", "running stats", _bn_inputs((2, 3, 4, 4)),
      kwargs=dict(use_input_stats=False), diff=(0, 3, 4))

_norm("rms_norm", "last dim", normal((3, 1024), (1024,)),
      kwargs=dict(normalized_shape=(1024,)), **_call("rms_norm", 0, "weight"),
      bench=normal(ROWS, ROWS[1:]))
_norm("rms_norm", "two dims, eps", normal((2, 3, 4), (3, 4)),
      kwargs=dict(normalized_shape=(3, 4), eps=1e-5), **_call("rms_norm", 0, "weight"))
_norm("rms_norm", "no weight", normal((3, 5)), kwargs=dict(normalized_shape=[5]))

_norm("local_response_norm", "size 3", normal((2, 6, 4, 4)), kwargs=dict(size=3),
      bench=normal(IMAGE))
_norm("local_response_norm", "size 4, (N, C, L), alpha k", normal((2, 5, 7)),
      kwargs=dict(size=4, alpha=0.1, beta=0.6, k=2.0))
_norm("local_response_norm", "size > C, 5-d", normal((1, 3, 2, 3, 2)),
      kwargs=dict(size=5, alpha=0.5))
_norm("local_response_norm", "size 1", normal((2, 3, 2, 2)), kwargs=dict(size=1, alpha=0.5))

_norm("normalize", "p 2, dim 1", normal((4, 6)), bench=normal(ROWS))
_norm("normalize", "p 1, dim 0", normal((4, 6)), kwargs=dict(p=1.0, dim=0))
_norm("normalize", "p 3, dim -1", normal((2, 3, 5)), kwargs=dict(p=3.0, dim=-1))
_norm("normalize", "p inf, 1-d", normal((5,)), kwargs=dict(p=float("inf"), dim=0))
