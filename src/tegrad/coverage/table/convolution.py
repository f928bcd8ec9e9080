"""Cases: convolutions, transposed convolutions, depthwise, unfold/fold against torch."""

from __future__ import annotations

from ..cases import case, normal

CAT = "convolution"
CONV_BENCH = normal((8, 64, 56, 56), (64, 64, 3, 3), (64,))


def _depthwise_ref(x, w, bias=None, **kwargs):
    import torch.nn.functional as F

    return F.conv2d(x, w, bias, groups=x.shape[1], **kwargs)


# -- conv1d / conv2d / conv3d
case("conv1d", "", normal((2, 3, 9), (4, 3, 3), (4,)), category=CAT,
     bench=normal((8, 64, 3136), (64, 64, 9), (64,)))
case("conv1d", "stride 3 > kernel 2, pad 1, no bias", normal((2, 3, 10), (4, 3, 2)),
     kwargs=dict(stride=3, padding=1), category=CAT)
# CORE LIMIT: input rows 3 p + 2 k (stride 3, dilation 2: coprime coefficients, neither a
# unit) are not solved by simplify/gather.py, so the input gradient stays a scatter
case("conv1d", "stride 3, dilation 2", normal((1, 2, 12), (3, 2, 2), (3,)),
     kwargs=dict(stride=3, dilation=2), category=CAT, gather_form=False)
case("conv1d", "same, even kernel, dilation 3", normal((1, 2, 9), (3, 2, 4), (3,)),
     kwargs=dict(padding="same", dilation=3), category=CAT)
case("conv2d", "", normal((2, 3, 6, 5), (4, 3, 3, 3), (4,)), kwargs=dict(padding=1),
     category=CAT, bench=CONV_BENCH)
case("conv2d", "stride 2, pad 1", normal((2, 3, 7, 7), (4, 3, 3, 3), (4,)),
     kwargs=dict(stride=2, padding=1), category=CAT, bench=CONV_BENCH)
case("conv2d", "valid, no bias", normal((1, 2, 5, 6), (3, 2, 2, 3)),
     kwargs=dict(padding="valid"), category=CAT)
case("conv2d", "stride (3, 2) > kernel 2, pad (1, 0)", normal((2, 2, 8, 7), (3, 2, 2, 2), (3,)),
     kwargs=dict(stride=(3, 2), padding=(1, 0)), category=CAT)
case("conv2d", "pad 2 >= kernel/2, dilation 2, groups 2",
     normal((1, 4, 7, 6), (6, 2, 3, 3), (6,)),
     kwargs=dict(padding=2, dilation=2, groups=2), category=CAT)
case("conv2d", "same, even kernel (2, 4), dilation (1, 2)",
     normal((2, 3, 5, 7), (2, 3, 2, 4), (2,)),
     kwargs=dict(padding="same", dilation=(1, 2)), category=CAT)
case("conv2d", "size-1 spatial, 1x1 kernel", normal((3, 4, 1, 1), (5, 4, 1, 1), (5,)),
     category=CAT)
case("conv2d", "groups 3, odd sizes, stride 2", normal((1, 6, 9, 7), (3, 2, 3, 1), (3,)),
     kwargs=dict(stride=2, padding=(1, 0), groups=3), category=CAT)
case("conv3d", "pad 1, stride (1, 2, 2)", normal((1, 2, 4, 5, 5), (3, 2, 3, 3, 3), (3,)),
     kwargs=dict(stride=(1, 2, 2), padding=1), category=CAT,
     bench=normal((2, 16, 16, 32, 32), (16, 16, 3, 3, 3), (16,)))
case("conv3d", "same, groups 2", normal((1, 4, 3, 4, 4), (2, 2, 2, 3, 2)),
     kwargs=dict(padding="same", groups=2), category=CAT)

# -- transposed convolutions (weight (C_in, C_out / groups, *k))
case("conv_transpose1d", "stride 2, pad 1, output_padding 1",
     normal((2, 3, 5), (3, 2, 3), (2,)),
     kwargs=dict(stride=2, padding=1, output_padding=1), category=CAT,
     bench=normal((8, 64, 1568), (64, 64, 9), (64,)))
case("conv_transpose1d", "stride 3 > kernel 2, dilation 2", normal((1, 2, 4), (2, 3, 2)),
     kwargs=dict(stride=3, dilation=2), category=CAT)
case("conv_transpose2d", "stride 2, pad 1", normal((2, 3, 4, 5), (3, 4, 3, 3), (4,)),
     kwargs=dict(stride=2, padding=1), category=CAT,
     bench=normal((8, 64, 28, 28), (64, 64, 3, 3), (64,)))
case("conv_transpose2d", "stride 1, no bias", normal((1, 2, 4, 3), (2, 3, 2, 2)),
     category=CAT)
case("conv_transpose2d", "groups 2, output_padding (1, 0), dilation (1, 2)",
     normal((1, 4, 3, 4), (4, 1, 3, 2), (2,)),
     kwargs=dict(stride=(2, 1), padding=(2, 1), output_padding=(1, 0), groups=2,
                 dilation=(1, 2)), category=CAT)
case("conv_transpose2d", "stride 3 > kernel 2, output_padding 2, size-1 input",
     normal((2, 2, 1, 3), (2, 2, 2, 2), (2,)),
     kwargs=dict(stride=3, output_padding=2), category=CAT)
case("conv_transpose3d", "stride 2, pad 1", normal((1, 2, 3, 3, 2), (2, 3, 3, 2, 3), (3,)),
     kwargs=dict(stride=2, padding=1), category=CAT,
     bench=normal((2, 16, 8, 16, 16), (16, 16, 3, 3, 3), (16,)))

# -- depthwise (conv2d with groups = C)
case("depthwise_conv2d", "pad 1", normal((2, 3, 5, 6), (3, 1, 3, 3), (3,)),
     kwargs=dict(padding=1), ref=_depthwise_ref, category=CAT,
     bench=normal((8, 64, 56, 56), (64, 1, 3, 3), (64,)))
case("depthwise_conv2d", "multiplier 2, stride 2, dilation 2, no bias",
     normal((1, 2, 9, 8), (4, 1, 3, 2)),
     kwargs=dict(stride=2, padding=(2, 1), dilation=2), ref=_depthwise_ref, category=CAT)

# -- unfold / fold
case("unfold", "3x3, pad 1", normal((2, 3, 5, 4)), kwargs=dict(kernel_size=3, padding=1),
     category=CAT, bench=normal((8, 64, 56, 56)))
# CORE LIMIT: rows 3 bh + 2 i (stride 3, dilation 2: coprime coefficients, neither a unit)
# are not solved by simplify/gather.py, so the input gradient stays a scatter
case("unfold", "stride 3 > kernel 2, dilation (2, 1)", normal((1, 2, 8, 7)),
     kwargs=dict(kernel_size=2, stride=3, dilation=(2, 1)), category=CAT, gather_form=False)
case("unfold", "unbatched, (2, 3) kernel, stride 2, pad (1, 2)", normal((2, 5, 6)),
     kwargs=dict(kernel_size=(2, 3), stride=2, padding=(1, 2)), category=CAT)
case("fold", "3x3, pad 1", normal((2, 27, 20)),
     kwargs=dict(output_size=(5, 4), kernel_size=3, padding=1), category=CAT)
case("fold", "3x3, pad 1, 28x28", normal((1, 18, 784)),  # kwargs fit the bench size
     kwargs=dict(output_size=28, kernel_size=3, padding=1), category=CAT,
     bench=normal((8, 576, 784)))
case("fold", "stride 2, dilation 2, odd size", normal((1, 8, 12)),
     kwargs=dict(output_size=(7, 9), kernel_size=2, stride=2, dilation=2), category=CAT)
case("fold", "unbatched, stride 3 > kernel 2, pad 1", normal((8, 9)),
     kwargs=dict(output_size=(8, 7), kernel_size=(2, 2), stride=3, padding=1), category=CAT)
