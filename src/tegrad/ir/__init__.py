"""The intermediate representation: interned scalar-expression and tensor nodes, their
printing and validation, and the constructions every stage shares.

Each module imports only those above it in this list:

    dtype      scalar types and promotion
    numpy_ops  the NumPy meaning of every scalar op
    expr       expression nodes, the ``Tensor`` base they read, constructors, ``Op``
    tensor     Placeholder, Compute, ScanOutput; ``placeholder``, ``make_compute``
    traverse   walking and rebuilding expressions; tensors in dependency order
    printer    index notation (``repr`` of expressions, ``str`` of tensors)
    affine     index expressions as linear forms
    bounds     intervals of index expressions
    verify     validation of a compute definition
    compute    ``tg.compute``: a compute, verified
    broadcast  arithmetic between whole tensors, with NumPy broadcasting
    scan       ``tg.scan`` and its per-step graph

(Programs as bytes and on disk: ``tegrad/cache/``.)

The nodes' ``repr``/``str`` and the tensors' operators need modules above the nodes
(the printer, and ``tg.compute`` with its verifier), so those modules give them to the
node classes when they load; importing any part of the package loads both.
"""

from . import broadcast, printer  # noqa: F401  (they complete Expr and Tensor, see above)
