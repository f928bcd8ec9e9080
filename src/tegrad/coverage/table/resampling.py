"""Cases: pixel (un)shuffle, interpolate (nearest, linear, bilinear, trilinear) and its
aliases, grid_sample, against torch."""

from __future__ import annotations

from ..cases import case, join, normal, uniform

CAT = "resampling"
IMAGES = normal((8, 64, 56, 56))


def _grid(shape, lo=-1.2, hi=1.2):
    """Sampling positions a little beyond [-1, 1], so padding modes are exercised."""
    return uniform(shape, lo=lo, hi=hi)


# -- pixel shuffle
case("pixel_shuffle", "r 2", normal((2, 8, 3, 4)), kwargs=dict(upscale_factor=2),
     category=CAT, bench=normal((8, 256, 56, 56)))
case("pixel_shuffle", "r 3, extra batch dim, size-1 spatial", normal((2, 1, 18, 1, 3)),
     kwargs=dict(upscale_factor=3), category=CAT)
case("pixel_unshuffle", "r 2", normal((2, 3, 4, 6)), kwargs=dict(downscale_factor=2),
     category=CAT, bench=normal((8, 64, 112, 112)))
case("pixel_unshuffle", "r 3, odd sizes", normal((1, 2, 3, 9)), kwargs=dict(downscale_factor=3),
     category=CAT)

# -- nearest
case("interpolate", "nearest 1d, size 5 -> 7", normal((2, 3, 5)), kwargs=dict(size=7),
     category=CAT)
case("interpolate", "nearest 2d, scale 2", normal((2, 3, 4, 5)), kwargs=dict(scale_factor=2),
     category=CAT, bench=IMAGES)
case("interpolate", "nearest 2d, size (5, 3) from (3, 7)", normal((1, 2, 3, 7)),
     kwargs=dict(size=(5, 3)), category=CAT)
case("interpolate", "nearest 2d, scale 1.5", normal((1, 2, 5, 4)),
     kwargs=dict(scale_factor=1.5, mode="nearest"), category=CAT)
case("interpolate", "nearest 2d, scale 1.5, recompute", normal((1, 2, 5, 3)),
     kwargs=dict(scale_factor=1.5, recompute_scale_factor=True), category=CAT)
case("interpolate", "nearest 3d, scale (2, 1, 0.5)", normal((1, 2, 3, 2, 5)),
     kwargs=dict(scale_factor=(2.0, 1.0, 0.5)), category=CAT,
     bench=normal((2, 32, 16, 32, 32)))

# -- linear / bilinear / trilinear, align_corners both ways
for align in (False, True):
    tag = f"align_corners={align}"
    case("interpolate", f"linear, size 4 -> 9, {tag}", normal((2, 3, 4)),
         kwargs=dict(size=9, mode="linear", align_corners=align), category=CAT)
    case("interpolate", f"bilinear, scale 2, {tag}", normal((2, 3, 4, 5)),
         kwargs=dict(scale_factor=2, mode="bilinear", align_corners=align), category=CAT,
         bench=IMAGES)
    case("interpolate", f"bilinear, size (3, 2) from (7, 5), {tag}", normal((1, 2, 7, 5)),
         kwargs=dict(size=(3, 2), mode="bilinear", align_corners=align), category=CAT)
    case("interpolate", f"bilinear, size-1 input and output, {tag}", normal((1, 2, 1, 4)),
         kwargs=dict(size=(3, 1), mode="bilinear", align_corners=align), category=CAT)
    case("interpolate", f"trilinear, size (3, 5, 2), {tag}", normal((1, 2, 2, 3, 4)),
         kwargs=dict(size=(3, 5, 2), mode="trilinear", align_corners=align), category=CAT)
case("interpolate", "bilinear, scale 1.7", normal((1, 2, 5, 6)),
     kwargs=dict(scale_factor=1.7, mode="bilinear"), category=CAT)
case("interpolate", "bilinear, scale (0.5, 2.5), recompute", normal((1, 2, 7, 3)),
     kwargs=dict(scale_factor=(0.5, 2.5), mode="bilinear", recompute_scale_factor=True),
     category=CAT)

# -- deprecated aliases
case("upsample", "bilinear, align_corners=True", normal((1, 2, 3, 4)),
     kwargs=dict(scale_factor=2, mode="bilinear", align_corners=True), category=CAT)
case("upsample_nearest", "scale 3", normal((1, 2, 3, 2)), kwargs=dict(scale_factor=3),
     category=CAT, bench=IMAGES)
case("upsample_bilinear", "size (5, 6)", normal((2, 1, 3, 4)), kwargs=dict(size=(5, 6)),
     category=CAT)
case("upsample_bilinear", "scale 2", normal((1, 2, 3, 4)), kwargs=dict(scale_factor=2),
     category=CAT, bench=IMAGES)

# -- grid_sample: positions are data (the floor of the grid): the input gradient is a
# scatter-add by construction, so gather form is not asserted (gather_form=None)
for align in (False, True):
    for padding in ("zeros", "border", "reflection"):
        case("grid_sample", f"bilinear, {padding}, align_corners={align}",
             join(normal((2, 3, 4, 5)), _grid((2, 3, 6, 2))),
             kwargs=dict(mode="bilinear", padding_mode=padding, align_corners=align),
             category=CAT, gather_form=None,
             bench=join(IMAGES, _grid((8, 56, 56, 2))) if padding == "zeros" and not align
             else None)
case("grid_sample", "nearest, zeros", join(normal((2, 3, 4, 5)), _grid((2, 3, 6, 2))),
     kwargs=dict(mode="nearest", align_corners=False), category=CAT, gather_form=None,
     bench=join(IMAGES, _grid((8, 56, 56, 2))))
case("grid_sample", "nearest, reflection, align_corners=True",
     join(normal((1, 2, 3, 4)), _grid((1, 5, 2, 2), lo=-2.5, hi=2.5)),
     kwargs=dict(mode="nearest", padding_mode="reflection", align_corners=True),
     category=CAT, gather_form=None)
