"""PyTorch references for ``tegrad.models``: torchvision's ResNet layout (torchvision
itself does not install beside the CPU torch wheel here) and the LSTM language model.
Written from torchvision's documented architecture: conv1 7x7/2, bn, relu, max pool
3x3/2, four stages (stride 2 from the second on; the bottleneck's stride on its 3x3
conv), a 1x1 conv + bn shortcut where the shape changes, global average pool, fc."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


class Basic(nn.Module):
    expansion = 1

    def __init__(self, c_in, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != planes:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, arch, num_classes, width):
        super().__init__()
        blocks, block = {"resnet18": ((2, 2, 2, 2), Basic), "resnet34": ((3, 4, 6, 3), Basic),
                         "resnet50": ((3, 4, 6, 3), Bottleneck)}[arch]
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c_in = width
        for stage, count in enumerate(blocks):
            layers = []
            for b in range(count):
                layers.append(block(c_in, width * 2 ** stage, 2 if stage and not b else 1))
                c_in = width * 2 ** stage * block.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in range(4):
            x = getattr(self, f"layer{stage + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class LanguageModel(nn.Module):
    def __init__(self, vocab, embed, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.embedding(tokens))
        return self.decoder(out)


# -- the same networks on both sides: tegrad graph, torch module, same weights and data -----


@dataclass
class NetworkPair:
    """A loss built with ``tegrad.models`` and the PyTorch module it mirrors."""

    loss: object
    logits: object
    params: dict  # name -> placeholder, named as ``module.named_parameters()``
    feeds: dict  # data placeholder -> array
    module: nn.Module
    torch_loss: Callable  # () -> (logits, loss) of the module on the same data


def resnet_pair(arch: str, classes: int, width: int, image: int, seed: int) -> NetworkPair:
    import tegrad as tg
    from tegrad.models import resnet, resnet_parameters

    torch.manual_seed(0)
    module = ResNet(arch, classes, width).double().train()
    params = resnet_parameters(arch, classes, width, dtype="float64")
    x = tg.placeholder((2, 3, image, image), "float64", name="x")
    target = tg.placeholder((2,), "int64", name="target")
    logits = resnet(x, params, arch)
    rng = np.random.default_rng(seed)
    xv, tv = rng.standard_normal(x.shape), rng.integers(0, classes, size=2)

    def torch_loss():
        out = module(torch.from_numpy(xv))
        return out, torch.nn.functional.cross_entropy(out, torch.from_numpy(tv))

    return NetworkPair(tg.nn.cross_entropy(logits, target), logits, params,
                       {x: xv, target: tv}, module, torch_loss)


def language_model_pair(vocab: int, embed: int, hidden: int, layers: int, steps: int,
                        batch: int, seed: int) -> NetworkPair:
    import tegrad as tg
    from tegrad.models import language_model, language_model_parameters

    torch.manual_seed(0)
    module = LanguageModel(vocab, embed, hidden, layers).double()
    params = language_model_parameters(vocab, embed, hidden, layers, dtype="float64")
    tokens = tg.placeholder((steps, batch), "int64", name="tokens")
    targets = tg.placeholder((steps, batch), "int64", name="targets")
    logits = language_model(tokens, params)
    loss = tg.nn.cross_entropy(tg.nn.reshape(logits, (steps * batch, vocab)),
                               tg.nn.reshape(targets, (steps * batch,)))
    rng = np.random.default_rng(seed)
    tok, tgt = (rng.integers(0, vocab, size=(steps, batch)) for _ in range(2))

    def torch_loss():
        out = module(torch.from_numpy(tok))
        return out, torch.nn.functional.cross_entropy(out.reshape(-1, vocab),
                                                      torch.from_numpy(tgt).reshape(-1))

    return NetworkPair(loss, logits, params, {tokens: tok, targets: tgt}, module, torch_loss)
