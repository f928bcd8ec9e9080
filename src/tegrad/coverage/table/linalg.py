"""Cases: linear algebra (``tg.nn.matmul``, ``linear``, ``einsum``...) against torch."""

from __future__ import annotations

from ..cases import case, normal

CAT = "linear algebra"


def _einsum(equation: str):
    """tegrad and torch sides of one equation (torch.einsum takes it positionally)."""
    def ours(*operands):
        from ... import nn

        return nn.einsum(equation, *operands)

    def theirs(*operands):
        import torch

        return torch.einsum(equation, *operands)

    return dict(fn=ours, ref=theirs)


# matmul: torch's rank rules (1-D operands drop their axis) and batch broadcasting
for label, shapes in [("1-D x 1-D", [(5,), (5,)]), ("1-D x 2-D", [(4,), (4, 3)]),
                      ("2-D x 1-D", [(3, 4), (4,)]), ("2-D x 2-D", [(3, 4), (4, 5)]),
                      ("1-D x 3-D", [(4,), (2, 4, 3)]), ("3-D x 1-D", [(2, 3, 4), (4,)]),
                      ("N-D broadcast", [(2, 1, 3, 4), (5, 4, 2)]),
                      ("batch 1 x batch", [(1, 3, 4), (2, 4, 2)])]:
    case("matmul", label, normal(*shapes), ref="torch.matmul", category=CAT)
case("matmul", "2-D, bench 512", normal((3, 4), (4, 2)), ref="torch.matmul", category=CAT,
     bench=normal((512, 512), (512, 512)))
case("matmul", "3-D, bench 1024", normal((2, 3, 4), (2, 4, 2)), ref="torch.matmul", category=CAT,
     bench=normal((1024, 1024), (1024, 1024)))
case("batch_matmul", "broadcast", normal((2, 1, 3, 4), (3, 4, 2)), ref="torch.matmul",
     category=CAT)
case("bmm", "", normal((2, 3, 4), (2, 4, 5)), ref="torch.bmm", category=CAT,
     bench=normal((32, 128, 128), (32, 128, 128)))
case("dot", "", normal((7,), (7,)), ref="torch.dot", category=CAT)
case("mv", "", normal((3, 5), (5,)), ref="torch.mv", category=CAT)
case("outer", "", normal((3,), (4,)), ref="torch.outer", category=CAT)

case("linear", "bias, 3-D input", normal((2, 3, 4), (5, 4), (5,)), category=CAT,
     bench=normal((4096, 1024), (1024, 1024), (1024,)))
case("linear", "no bias", normal((3, 4), (5, 4)), category=CAT)
case("linear", "1-D input", normal((4,), (5, 4), (5,)), category=CAT)
case("linear", "1-D weight", normal((3, 4), (4,)), category=CAT)
case("bilinear", "bias", normal((3, 4), (3, 5), (2, 4, 5), (2,)), category=CAT,
     bench=normal((512, 64), (512, 64), (64, 64, 64), (64,)))
case("bilinear", "no bias, 3-D input", normal((2, 3, 4), (2, 3, 2), (3, 4, 2)), category=CAT)

for equation, shapes in [("ij,jk->ik", [(3, 4), (4, 5)]),
                         ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
                         ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
                         ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("ij->", [(3, 4)]),
                         ("ij->ji", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
                         ("ij,ij->i", [(3, 4), (3, 4)]), ("ij,jk", [(3, 4), (4, 2)]),
                         ("bi,j->bij", [(2, 1), (3,)]),  # size-1 label against none
                         ("ik,jk->ij", [(3, 1), (2, 4)])]:  # size-1 dim broadcasts
    case("einsum", equation, normal(*shapes), category=CAT, **_einsum(equation))

case("trace", "square", normal((4, 4)), ref="torch.trace", category=CAT)
case("trace", "wide", normal((3, 5)), ref="torch.trace", category=CAT)
case("diagonal", "", normal((4, 4)), ref="torch.diagonal", category=CAT)
case("diagonal", "offset 1, dims 0 2", normal((3, 2, 4)), kwargs=dict(offset=1, dim1=0, dim2=2),
     ref="torch.diagonal", category=CAT)
case("diagonal", "offset -1, dims -1 -2", normal((2, 4, 3)),
     kwargs=dict(offset=-1, dim1=-1, dim2=-2), ref="torch.diagonal", category=CAT)
for op in ("triu", "tril"):
    case(op, "", normal((4, 5)), ref=f"torch.{op}", category=CAT,
         bench=normal((1024, 1024)))
    case(op, "diagonal 1, batch", normal((2, 3, 4)), kwargs=dict(diagonal=1),
         ref=f"torch.{op}", category=CAT)
    case(op, "diagonal -1", normal((4, 3)), kwargs=dict(diagonal=-1), ref=f"torch.{op}",
         category=CAT)

case("addmm", "", normal((3, 5), (3, 4), (4, 5)), ref="torch.addmm", category=CAT,
     bench=normal((1024, 1024), (1024, 1024), (1024, 1024)))
case("addmm", "beta, alpha, 1-D input", normal((5,), (3, 4), (4, 5)),
     kwargs=dict(beta=0.5, alpha=-2.0), ref="torch.addmm", category=CAT)
case("addmm", "beta 0", normal((3, 5), (3, 4), (4, 5)), kwargs=dict(beta=0),
     ref="torch.addmm", category=CAT)
case("baddbmm", "", normal((2, 3, 5), (2, 3, 4), (2, 4, 5)), kwargs=dict(beta=2.0, alpha=0.5),
     ref="torch.baddbmm", category=CAT)
case("baddbmm", "broadcast input", normal((1, 5), (2, 3, 4), (2, 4, 5)), ref="torch.baddbmm",
     category=CAT)
