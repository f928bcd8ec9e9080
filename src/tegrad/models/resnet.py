"""ResNet-18 / ResNet-50 as one tensor-expression graph, in torchvision's layer layout.

    params = resnet_parameters("resnet50", num_classes=10)     # name -> placeholder
    logits = resnet(x, params, "resnet50")                     # x: (N, 3, H, W)
    grads  = tg.gradient(loss, list(params.values()), head)    # the whole backward

Parameter names are torchvision's ``state_dict`` keys (``conv1.weight``,
``layer2.0.downsample.1.bias``, ``fc.weight``...), so its weights load by name. Batch norm
runs in training mode (batch statistics, as a network being trained), so the running
statistics are not parameters here. ``width`` scales every channel count (torchvision:
64), for small test networks with the same layout.
"""

from __future__ import annotations

from .. import nn
from ..ir.tensor import Tensor, placeholder

# blocks per stage, and whether the block is a bottleneck (expansion 4) or basic (1)
ARCHITECTURES = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
}


def _check(arch: str) -> tuple[tuple[int, ...], bool]:
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; one of {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def parameter_shapes(arch: str = "resnet18", num_classes: int = 1000, width: int = 64
                     ) -> dict[str, tuple[int, ...]]:
    """torchvision's parameter names and shapes (no running statistics)."""
    blocks, bottleneck = _check(arch)
    expansion = 4 if bottleneck else 1
    shapes: dict[str, tuple[int, ...]] = {}

    def conv_bn(prefix: str, bn: str, c_in: int, c_out: int, k: int) -> None:
        shapes[f"{prefix}.weight"] = (c_out, c_in, k, k)
        shapes[f"{bn}.weight"] = (c_out,)
        shapes[f"{bn}.bias"] = (c_out,)

    conv_bn("conv1", "bn1", 3, width, 7)
    c_in = width
    for stage, count in enumerate(blocks):
        planes = width * 2 ** stage
        for b in range(count):
            p = f"layer{stage + 1}.{b}"
            stride = 2 if stage > 0 and b == 0 else 1
            if bottleneck:
                conv_bn(f"{p}.conv1", f"{p}.bn1", c_in, planes, 1)
                conv_bn(f"{p}.conv2", f"{p}.bn2", planes, planes, 3)
                conv_bn(f"{p}.conv3", f"{p}.bn3", planes, planes * expansion, 1)
            else:
                conv_bn(f"{p}.conv1", f"{p}.bn1", c_in, planes, 3)
                conv_bn(f"{p}.conv2", f"{p}.bn2", planes, planes, 3)
            if stride != 1 or c_in != planes * expansion:
                conv_bn(f"{p}.downsample.0", f"{p}.downsample.1", c_in, planes * expansion, 1)
            c_in = planes * expansion
    shapes["fc.weight"] = (num_classes, c_in)
    shapes["fc.bias"] = (num_classes,)
    return shapes


def resnet_parameters(arch: str = "resnet18", num_classes: int = 1000, width: int = 64,
                      dtype: str = "float32") -> dict[str, Tensor]:
    """One placeholder per parameter, named as torchvision names it."""
    return {name: placeholder(shape, dtype, name=name)
            for name, shape in parameter_shapes(arch, num_classes, width).items()}


def _conv_bn(x: Tensor, params: dict[str, Tensor], conv: str, bn: str, stride: int = 1,
             padding: int = 0) -> Tensor:
    y = nn.conv2d(x, params[f"{conv}.weight"], None, stride=stride, padding=padding)
    return nn.batch_norm(y, None, None, params[f"{bn}.weight"], params[f"{bn}.bias"],
                      training=True)


def resnet(x: Tensor, params: dict[str, Tensor], arch: str = "resnet18") -> Tensor:
    """The logits (N, num_classes) of torchvision's ``resnet18/34/50`` on ``x``."""
    blocks, bottleneck = _check(arch)
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"resnet: x must be (N, 3, H, W), got {x.shape}")
    missing = sorted(set(parameter_shapes(arch, params["fc.weight"].shape[0],
                                          params["conv1.weight"].shape[0])) - set(params))
    if missing:
        raise ValueError(f"resnet: parameters missing for {arch}: {', '.join(missing[:5])}")
    y = nn.relu(_conv_bn(x, params, "conv1", "bn1", stride=2, padding=3))
    y = nn.max_pool2d(y, 3, 2, 1)
    for stage, count in enumerate(blocks):
        for b in range(count):
            p = f"layer{stage + 1}.{b}"
            stride = 2 if stage > 0 and b == 0 else 1
            if bottleneck:
                out = nn.relu(_conv_bn(y, params, f"{p}.conv1", f"{p}.bn1"))
                out = nn.relu(_conv_bn(out, params, f"{p}.conv2", f"{p}.bn2", stride, 1))
                out = _conv_bn(out, params, f"{p}.conv3", f"{p}.bn3")
            else:
                out = nn.relu(_conv_bn(y, params, f"{p}.conv1", f"{p}.bn1", stride, 1))
                out = _conv_bn(out, params, f"{p}.conv2", f"{p}.bn2", 1, 1)
            if f"{p}.downsample.0.weight" in params:
                y = _conv_bn(y, params, f"{p}.downsample.0", f"{p}.downsample.1", stride)
            y = nn.relu(out + y)
    y = nn.adaptive_avg_pool2d(y, 1)
    y = nn.reshape(y, (y.shape[0], y.shape[1]))
    return nn.linear(y, params["fc.weight"], params["fc.bias"])
