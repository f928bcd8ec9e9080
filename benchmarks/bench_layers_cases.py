"""The cases of ``bench_layers.py``: layer shapes taken from real networks, each written
twice (tegrad with ``tg.nn`` on placeholders, PyTorch eager) on the same float32 arrays.

Networks and their input sizes (batch 8 unless a name says otherwise):

- ``resnet18``: every distinct conv of ResNet-18 on 3x64x64 images (stem 7x7 stride 2,
  3x3 at 16^2 down to 512 channels at 2^2, the strided 1x1 downsamples), its stem's batch
  norm (training) and max pool (3x3 stride 2 pad 1), the global average pool and the fc.
- ``resnet50``: every distinct conv of ResNet-50 on 3x56x56 images (1x1 expand and reduce,
  3x3 at 14^2 down to 2^2, the strided 1x1 downsamples), a bottleneck's batch norm, the
  max pool and the global average pool of 2048 channels.
- ``mobilenet_v2``: MobileNetV2 on 3x112x112 images: the stem, depthwise 3x3 (stride 1 and
  2) from 32 channels at 56^2 to 576 at 7^2, the 1x1 expand and project convs.
- ``unet``: a U-Net decoder stage at 28^2 -> 56^2: conv_transpose2d 64->32 (2x2 and 3x3,
  stride 2), the skip connection's cat followed by a 3x3 conv, a group norm.
- ``transformer``: an encoder block at batch 8 x sequence 128 x d 256, 4 heads, FFN 1024:
  the projections, causal attention (scaled_dot_product_attention, multi_head_attention),
  layer_norm, gelu.
- ``lstm_lm``: the LSTM language model (vocabulary 10k, embedding and hidden 256, 35 steps
  of batch 20): embedding, lstm, decoder linear + cross_entropy.
- ``embedding``, ``losses``: embedding 50k x 256 with 4096 ids; cross_entropy with weight,
  ignore_index and label smoothing, plain cross_entropy, nll_loss and mse_loss at 256x1000.
- ``train``: whole training steps, loss and every parameter gradient: ResNet-18 (N=8,
  3x64x64), ResNet-50 (N=2, 3x64x64), the transformer block (``torch.nn.
  TransformerEncoderLayer``'s parameters, causal) and the 2-layer LSTM language model;
  tegrad from ``tegrad.models`` (the block from ``tg.nn``), torch from
  ``tests/torch_models.py`` (and ``torch.nn``) with the same weights.

A case differentiates the float inputs torch does (not a loss's targets or class weights,
not a network's images); the backward row is the gradient of those for a random head.
Identical layer shapes met twice (ResNet-18's and ResNet-50's 3x3 512->512 at 2^2) are
one case, named where it was met first.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tegrad as tg
from bench_cpu_cases import Graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TOLERANCE = 1e-4  # max abs difference over max abs torch (bench_cpu's)
NETWORK_TOLERANCE = 2e-3  # float32 on both sides, summed in other orders over 20-50 layers


@dataclass(frozen=True)
class Array:
    """One input: ``normal`` (standard normal times ``scale``), ``uniform`` in ``[lo,
    hi)``, ``ids`` (int64 in ``[0, high)``, ``ignored`` of them set to -100), or
    ``causal`` (a square bool mask, True above the diagonal: where attention is not
    allowed, torch's MHA convention)."""

    name: str
    shape: tuple
    kind: str = "normal"
    scale: float = 1.0
    lo: float = 0.0
    hi: float = 1.0
    high: int = 0
    ignored: int = 0

    @property
    def dtype(self) -> str:
        return {"ids": "int64", "causal": "bool"}.get(self.kind, "float32")

    def draw(self, rng) -> np.ndarray:
        if self.kind == "causal":
            return np.triu(np.ones(self.shape, dtype=bool), 1)
        if self.kind == "ids":
            ids = rng.integers(0, self.high, size=self.shape).astype(np.int64)
            ids.reshape(-1)[: self.ignored] = -100
            return ids
        if self.kind == "uniform":
            return rng.uniform(self.lo, self.hi, size=self.shape).astype(np.float32)
        return (self.scale * rng.standard_normal(self.shape)).astype(np.float32)


@dataclass(frozen=True)
class Layer:
    """One case. ``forward(*placeholders)`` is the tegrad output; ``torch_fn(*tensors)``
    torch's, on the same arrays in the same order; ``wrt``: the differentiated inputs
    (None: every float one). ``setup``, for the whole networks, replaces both: it returns
    ``(arrays, torch_setup)`` with ``torch_setup(arrays) -> (fn, leaves)`` as in
    ``bench_cpu_cases``."""

    name: str
    title: str
    inputs: tuple
    forward: Callable
    torch_fn: Callable | None = None
    wrt: tuple | None = None
    tolerance: float = TOLERANCE
    setup: Callable | None = field(default=None, compare=False)
    # a network of ReLUs and batch norms: its float32 gradients jump where rounding moves
    # a pre-activation across 0 (one element of 16384 in ResNet-18's last block moves
    # every gradient upstream by up to 30%, torch's float32 against its float64 by 7%):
    # its float32 loss is checked, its gradients in float64 against torch's float64
    kinked: bool = False

    @property
    def network(self) -> str:
        return self.name.split(".", 1)[0]

    def differentiated(self) -> tuple:
        if self.wrt is not None:
            return self.wrt
        return tuple(k for k, a in enumerate(self.inputs) if a.dtype == "float32")

    def graph(self, floats: str = "float32") -> Graph:
        """The output and its gradients, with the float inputs (and the head) of dtype
        ``floats``."""
        inputs = [tg.placeholder(a.shape, floats if a.dtype == "float32" else a.dtype,
                                 name=a.name) for a in self.inputs]
        out = self.forward(*inputs)
        head = tg.placeholder(out.shape, floats, name="head")
        wrt = [inputs[k] for k in self.differentiated()]
        return Graph(inputs, out, head, list(tg.gradient(out, wrt, head=head)), wrt)

    def make_arrays(self, graph: Graph, seed: int = 0):
        """``(arrays, head, torch_setup)``."""
        rng = np.random.default_rng(seed)
        if self.setup is not None:
            arrays, torch_setup = self.setup(rng)
        else:
            arrays = [a.draw(rng) for a in self.inputs]
            torch_setup = self._torch_setup
        return arrays, rng.standard_normal(graph.head.shape, dtype=np.float32), torch_setup

    def _torch_setup(self, arrays):
        """``(fn, leaves)``: the differentiated inputs are leaves, the rest fixed."""
        import torch

        tensors = [torch.from_numpy(a.copy()) for a in arrays]
        wrt = self.differentiated()
        leaves = [tensors[k].requires_grad_() for k in wrt]

        def fn(*given):
            merged = list(tensors)
            for k, leaf in zip(wrt, given, strict=True):
                merged[k] = leaf
            return self.torch_fn(*merged)
        return fn, leaves


def _F():
    import torch.nn.functional as F

    return F


# -- convolutions and pools -------------------------------------------------------------


def conv(name, n, c, size, k, kernel, stride=1, padding=0, groups=1, bias=False) -> Layer:
    """conv2d (depthwise where ``groups == c == k``) of (n, c, size, size) images."""
    out = (size + 2 * padding - kernel) // stride + 1
    kind = "depthwise " if groups == c == k and groups > 1 else ""
    title = (f"{kind}conv {kernel}x{kernel}" + (f" s{stride}" if stride > 1 else "")
             + f" {c}->{k} at {size}^2 -> {out}^2, N={n}")
    inputs = (Array("x", (n, c, size, size)), Array("w", (k, c // groups, kernel, kernel),
                                                    scale=(c // groups * kernel ** 2) ** -0.5))
    inputs += (Array("b", (k,)),) if bias else ()

    def forward(x, w, b=None):
        if kind:
            return tg.nn.depthwise_conv2d(x, w, b, stride=stride, padding=padding)
        return tg.nn.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)

    def torch_fn(x, w, b=None):
        return _F().conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
    return Layer(name, title, inputs, forward, torch_fn)


def conv_transpose(name, n, c, size, k, kernel, stride, padding=0, output_padding=0) -> Layer:
    out = (size - 1) * stride - 2 * padding + kernel + output_padding
    inputs = (Array("x", (n, c, size, size)),
              Array("w", (c, k, kernel, kernel), scale=(c * kernel ** 2) ** -0.5),
              Array("b", (k,)))
    options = dict(stride=stride, padding=padding, output_padding=output_padding)
    return Layer(name, f"conv_transpose2d {kernel}x{kernel} s{stride} {c}->{k} at {size}^2 "
                 f"-> {out}^2, N={n}", inputs,
                 lambda x, w, b: tg.nn.conv_transpose2d(x, w, b, **options),
                 lambda x, w, b: _F().conv_transpose2d(x, w, b, **options))


def max_pool(name, n, c, size) -> Layer:
    return Layer(name, f"max_pool2d 3x3 s2 p1, {n}x{c}x{size}^2", (Array("x", (n, c, size, size)),),
                 lambda x: tg.nn.max_pool2d(x, 3, 2, 1), lambda x: _F().max_pool2d(x, 3, 2, 1))


def global_pool(name, n, c, size) -> Layer:
    return Layer(name, f"adaptive_avg_pool2d -> 1, {n}x{c}x{size}^2",
                 (Array("x", (n, c, size, size)),),
                 lambda x: tg.nn.adaptive_avg_pool2d(x, 1),
                 lambda x: _F().adaptive_avg_pool2d(x, 1))


def batch_norm(name, n, c, size) -> Layer:
    inputs = (Array("x", (n, c, size, size)), Array("weight", (c,)), Array("bias", (c,)))
    return Layer(name, f"batch_norm (training), {n}x{c}x{size}^2", inputs,
                 lambda x, w, b: tg.nn.batch_norm(x, None, None, w, b, training=True),
                 lambda x, w, b: _F().batch_norm(x, None, None, w, b, training=True))


def group_norm(name, n, c, size, groups) -> Layer:
    inputs = (Array("x", (n, c, size, size)), Array("weight", (c,)), Array("bias", (c,)))
    return Layer(name, f"group_norm {groups} groups, {n}x{c}x{size}^2", inputs,
                 lambda x, w, b: tg.nn.group_norm(x, groups, w, b),
                 lambda x, w, b: _F().group_norm(x, groups, w, b))


def linear(name, rows, fan_in, fan_out, title=None) -> Layer:
    inputs = (Array("x", rows + (fan_in,)), Array("w", (fan_out, fan_in), scale=fan_in ** -0.5),
              Array("b", (fan_out,)))
    return Layer(name, title or f"linear {fan_in}->{fan_out} on {'x'.join(map(str, rows))}",
                 inputs, tg.nn.linear, lambda x, w, b: _F().linear(x, w, b))


def resnet18_layers() -> list[Layer]:
    n = 8
    layers = [conv("resnet18.conv1", n, 3, 64, 64, 7, 2, 3),
              batch_norm("resnet18.bn1", n, 64, 32),
              max_pool("resnet18.maxpool", n, 64, 32),
              conv("resnet18.layer1.conv", n, 64, 16, 64, 3, 1, 1)]
    for stage, size in ((2, 16), (3, 8), (4, 4)):  # the stage's input size
        c = 16 * 2 ** stage  # input channels; the stage's are twice as many
        layers += [conv(f"resnet18.layer{stage}.0.conv1", n, c, size, 2 * c, 3, 2, 1),
                   conv(f"resnet18.layer{stage}.conv", n, 2 * c, size // 2, 2 * c, 3, 1, 1),
                   conv(f"resnet18.layer{stage}.0.downsample", n, c, size, 2 * c, 1, 2)]
    return layers + [global_pool("resnet18.avgpool", n, 512, 2),
                     linear("resnet18.fc", (n,), 512, 1000)]


def resnet50_layers() -> list[Layer]:
    n = 8
    layers = [conv("resnet50.conv1", n, 3, 56, 64, 7, 2, 3),
              max_pool("resnet50.maxpool", n, 64, 28),
              conv("resnet50.layer1.0.conv1", n, 64, 14, 64, 1),
              conv("resnet50.layer1.conv2", n, 64, 14, 64, 3, 1, 1),
              conv("resnet50.layer1.conv3", n, 64, 14, 256, 1),  # = layer1.0.downsample
              conv("resnet50.layer1.conv1", n, 256, 14, 64, 1),
              batch_norm("resnet50.layer1.bn3", n, 256, 14)]
    for stage, size in ((2, 14), (3, 7), (4, 4)):  # the stage's input size
        planes, out = 32 * 2 ** stage, (size + 1) // 2
        c_in = 2 * planes  # the previous stage's output: 4 x its planes
        layers += [conv(f"resnet50.layer{stage}.0.conv1", n, c_in, size, planes, 1),
                   conv(f"resnet50.layer{stage}.0.conv2", n, planes, size, planes, 3, 2, 1),
                   conv(f"resnet50.layer{stage}.conv3", n, planes, out, 4 * planes, 1),
                   conv(f"resnet50.layer{stage}.0.downsample", n, c_in, size, 4 * planes, 1, 2),
                   conv(f"resnet50.layer{stage}.conv1", n, 4 * planes, out, planes, 1),
                   conv(f"resnet50.layer{stage}.conv2", n, planes, out, planes, 3, 1, 1)]
    return layers + [global_pool("resnet50.avgpool", n, 2048, 2)]


def mobilenet_v2_layers() -> list[Layer]:
    """Inverted residual blocks (expand 1x1, depthwise 3x3, project 1x1) on 112^2."""
    n, m = 8, "mobilenet_v2"

    def dw(name, c, size, stride=1):
        return conv(f"{m}.{name}", n, c, size, c, 3, stride, 1, groups=c)

    return [conv(f"{m}.stem", n, 3, 112, 32, 3, 2, 1),
            dw("block1.dw", 32, 56),
            conv(f"{m}.block2.expand", n, 16, 56, 96, 1),
            dw("block2.dw_s2", 96, 56, 2),
            conv(f"{m}.block2.project", n, 96, 28, 24, 1),
            conv(f"{m}.block3.expand", n, 24, 28, 144, 1),
            dw("block3.dw", 144, 28),
            conv(f"{m}.block3.project", n, 144, 28, 24, 1),
            dw("block4.dw_s2", 144, 28, 2),
            dw("block5.dw", 192, 14),
            dw("block8.dw", 384, 7),
            conv(f"{m}.block8.expand", n, 64, 7, 384, 1),
            conv(f"{m}.block8.project", n, 384, 7, 64, 1),
            dw("block14.dw_s2", 576, 7, 2),
            conv(f"{m}.last", n, 320, 4, 1280, 1),
            global_pool(f"{m}.avgpool", n, 1280, 4)]


def unet_layers() -> list[Layer]:
    """A decoder stage: up-convolution 28^2 -> 56^2, the skip's cat, a 3x3 conv."""
    n = 8
    inputs = (Array("up", (n, 32, 56, 56)), Array("skip", (n, 32, 56, 56)),
              Array("w", (32, 64, 3, 3), scale=(64 * 9) ** -0.5), Array("b", (32,)))

    def cat_conv(up, skip, w, b):
        return tg.nn.conv2d(tg.nn.cat([up, skip], dim=1), w, b, padding=1)

    def torch_cat_conv(up, skip, w, b):
        import torch

        return _F().conv2d(torch.cat([up, skip], dim=1), w, b, padding=1)

    return [conv_transpose("unet.up_2x2", n, 64, 28, 32, 2, 2),
            conv_transpose("unet.up_3x3", n, 64, 28, 32, 3, 2, 1, 1),
            Layer("unet.cat_conv", f"cat(up, skip) 2x32 ch + conv 3x3 64->32 at 56^2, N={n}",
                  inputs, cat_conv, torch_cat_conv),
            group_norm("unet.group_norm", n, 64, 56, 32)]


# -- attention, sequences, embeddings, losses -------------------------------------------

BATCH, SEQ, MODEL, HEADS, FFN = 8, 128, 256, 4, 1024


def transformer_layers() -> list[Layer]:
    rows, d, t = (BATCH, SEQ), MODEL, "transformer"
    per_head = (BATCH, HEADS, SEQ, d // HEADS)
    heads = (Array("q", per_head), Array("k", per_head), Array("v", per_head))
    mha = (Array("x", rows + (d,)), Array("in_proj_weight", (3 * d, d), scale=d ** -0.5),
           Array("in_proj_bias", (3 * d,)), Array("out_proj_weight", (d, d), scale=d ** -0.5),
           Array("out_proj_bias", (d,)))

    def mha_forward(x, in_w, in_b, out_w, out_b, m):
        return tg.nn.multi_head_attention(x, x, x, HEADS, in_w, in_b, out_w, out_b,
                                          attn_mask=m, is_causal=True)

    def mha_torch(x, in_w, in_b, out_w, out_b, m):
        """``torch.nn.MultiheadAttention(batch_first=True)``'s call: one transposed input
        for query, key and value (self-attention: one packed projection)."""
        xt = x.transpose(0, 1)
        return _F().multi_head_attention_forward(
            xt, xt, xt, d, HEADS, in_w, in_b, None, None, False, 0.0, out_w, out_b,
            need_weights=False, attn_mask=m, is_causal=True)[0].transpose(0, 1)

    norm = (Array("x", rows + (d,)), Array("weight", (d,)), Array("bias", (d,)))
    return [linear(f"{t}.qkv", rows, d, 3 * d),
            linear(f"{t}.ffn1", rows, d, FFN),
            linear(f"{t}.ffn2", rows, FFN, d),
            Layer(f"{t}.sdpa_causal", f"scaled_dot_product_attention causal, {BATCH}x{HEADS}"
                  f"x{SEQ}x{d // HEADS}", heads,
                  lambda q, k, v: tg.nn.scaled_dot_product_attention(q, k, v, is_causal=True),
                  lambda q, k, v: _F().scaled_dot_product_attention(q, k, v, is_causal=True)),
            Layer(f"{t}.mha_causal", f"multi_head_attention {HEADS} heads causal, "
                  f"{BATCH}x{SEQ}x{d}", mha + (Array("mask", (SEQ, SEQ), "causal"),),
                  mha_forward, mha_torch),
            Layer(f"{t}.layer_norm", f"layer_norm over {d}, {BATCH}x{SEQ}x{d}", norm,
                  lambda x, w, b: tg.nn.layer_norm(x, (d,), w, b),
                  lambda x, w, b: _F().layer_norm(x, (d,), w, b)),
            Layer(f"{t}.gelu", f"gelu, {BATCH}x{SEQ}x{FFN}", (Array("x", rows + (FFN,)),),
                  tg.nn.gelu, lambda x: _F().gelu(x))]


VOCAB, EMBED, HIDDEN, STEPS, LM_BATCH = 10000, 256, 256, 35, 20


def _lstm_layer(name: str) -> Layer:
    """``torch.nn.LSTM`` with the arrays loaded (``bench_lstm``'s loading), h0 and c0
    differentiated too."""
    import bench_lstm

    bound = HIDDEN ** -0.5  # torch.nn.LSTM's initialisation
    shapes = {"x": (STEPS, LM_BATCH, EMBED), "h0": (LM_BATCH, HIDDEN), "c0": (LM_BATCH, HIDDEN),
              "weight_ih": (4 * HIDDEN, EMBED), "weight_hh": (4 * HIDDEN, HIDDEN),
              "bias_ih": (4 * HIDDEN,), "bias_hh": (4 * HIDDEN,)}
    inputs = tuple(Array(k, s) if k in ("x", "h0", "c0") else
                   Array(k, s, "uniform", lo=-bound, hi=bound) for k, s in shapes.items())

    def setup(rng):
        arrays = [a.draw(rng) for a in inputs]

        def torch_setup(values):
            ref = bench_lstm.TorchLSTM(values, np.zeros((STEPS, LM_BATCH, HIDDEN), np.float32))
            return (lambda x, h0, c0, *_params: ref.module(x, (h0, c0))[0]), ref.leaves
        return arrays, torch_setup

    return Layer(name, f"lstm L={STEPS} N={LM_BATCH} I={EMBED} H={HIDDEN}", inputs,
                 lambda *ps: tg.nn.lstm(*ps, name="lstm")[0], setup=setup)


def _embedding(name: str, ids: tuple, vocab: int, dim: int) -> Layer:
    inputs = (Array("ids", ids, "ids", high=vocab), Array("weight", (vocab, dim)))
    return Layer(name, f"embedding {vocab}x{dim}, {'x'.join(map(str, ids))} ids", inputs,
                 lambda i, w: tg.nn.embedding(i, w), lambda i, w: _F().embedding(i, w))


def lstm_lm_layers() -> list[Layer]:
    rows = STEPS * LM_BATCH
    inputs = (Array("x", (rows, HIDDEN)), Array("w", (VOCAB, HIDDEN), scale=HIDDEN ** -0.5),
              Array("b", (VOCAB,)), Array("target", (rows,), "ids", high=VOCAB))
    return [_embedding("lstm_lm.embedding", (STEPS, LM_BATCH), VOCAB, EMBED),
            _lstm_layer("lstm_lm.lstm"),
            Layer("lstm_lm.decoder_loss", f"linear {HIDDEN}->{VOCAB} + cross_entropy, {rows} rows",
                  inputs, lambda x, w, b, t: tg.nn.cross_entropy(tg.nn.linear(x, w, b), t),
                  lambda x, w, b, t: _F().cross_entropy(_F().linear(x, w, b), t))]


def loss_layers() -> list[Layer]:
    rows, classes = 256, 1000
    logits, target = Array("input", (rows, classes)), Array("target", (rows,), "ids", high=classes)
    weight = Array("weight", (classes,), "uniform", lo=0.5, hi=2.0)
    smooth = dict(ignore_index=-100, label_smoothing=0.1)
    ignoring = Array("target", (rows,), "ids", high=classes, ignored=16)
    return [Layer("losses.cross_entropy_weight_ignore_smoothing",
                  f"cross_entropy weight, ignore_index (16 ignored), label_smoothing 0.1, "
                  f"{rows}x{classes}", (logits, ignoring, weight),
                  lambda x, t, w: tg.nn.cross_entropy(x, t, w, **smooth),
                  lambda x, t, w: _F().cross_entropy(x, t, w, **smooth), wrt=(0,)),
            Layer("losses.cross_entropy", f"cross_entropy {rows}x{classes}", (logits, target),
                  tg.nn.cross_entropy, lambda x, t: _F().cross_entropy(x, t)),
            Layer("losses.nll_loss", f"nll_loss {rows}x{classes}", (logits, target),
                  tg.nn.nll_loss, lambda x, t: _F().nll_loss(x, t)),
            Layer("losses.mse_loss", f"mse_loss {rows}x{classes}",
                  (logits, Array("target", (rows, classes))), tg.nn.mse_loss,
                  lambda x, y: _F().mse_loss(x, y))]


# -- whole training steps ---------------------------------------------------------------


def _network(name: str, title: str, data: tuple, params: dict, forward, make_module,
             torch_loss, kinked: bool = False) -> Layer:
    """A training step: ``forward(*data, params_dict)`` is tegrad's loss;
    ``make_module()`` torch's module (its initial weights are the arrays);
    ``torch_loss(module, *data_tensors)`` torch's loss. Every parameter is differentiated,
    no data input."""
    names = list(params)
    inputs = data + tuple(Array(k, s) for k, s in params.items())

    def tegrad_loss(*placeholders):
        return forward(*placeholders[:len(data)], dict(zip(names, placeholders[len(data):],
                                                          strict=True)))

    def setup(rng):
        import torch

        torch.manual_seed(0)
        module = make_module()
        own = dict(module.named_parameters())
        arrays = [a.draw(rng) for a in data] + [own[k].detach().numpy().copy() for k in names]

        def torch_setup(values):
            """The module in the values' dtype (float64 values: a float64 copy of it)."""
            float64 = values[len(data)].dtype == np.float64
            net = copy.deepcopy(module).double() if float64 else module
            params = dict(net.named_parameters())
            with torch.no_grad():
                for k, v in zip(names, values[len(data):], strict=True):
                    params[k].copy_(torch.from_numpy(v))
            fixed = [torch.from_numpy(v) for v in values[:len(data)]]
            return (lambda *_leaves: torch_loss(net, *fixed)), [params[k] for k in names]
        return arrays, torch_setup

    return Layer(name, title, inputs, tegrad_loss,
                 wrt=tuple(range(len(data), len(inputs))), tolerance=NETWORK_TOLERANCE,
                 setup=setup, kinked=kinked)


def resnet_step(arch: str, n: int, image: int, classes: int = 1000) -> Layer:
    from tegrad.models import parameter_shapes, resnet

    def make_module():
        from torch_models import ResNet

        return ResNet(arch, classes, 64).train()

    def torch_loss(module, x, target):
        return _F().cross_entropy(module(x), target)

    data = (Array("x", (n, 3, image, image)), Array("target", (n,), "ids", high=classes))
    return _network(f"train.{arch}", f"{arch} training step, N={n} 3x{image}x{image}, "
                    f"{classes} classes: loss and every parameter gradient", data,
                    parameter_shapes(arch, classes, 64),
                    lambda x, t, ps: tg.nn.cross_entropy(resnet(x, ps, arch), t),
                    make_module, torch_loss, kinked=True)


def _encoder_block(x, mask, p):
    """``torch.nn.TransformerEncoderLayer`` (post-norm, gelu, no dropout), causal."""
    nn, d = tg.nn, MODEL
    a = nn.multi_head_attention(x, x, x, HEADS, p["self_attn.in_proj_weight"],
                                p["self_attn.in_proj_bias"], p["self_attn.out_proj.weight"],
                                p["self_attn.out_proj.bias"], attn_mask=mask, is_causal=True)
    h = nn.layer_norm(x + a, (d,), p["norm1.weight"], p["norm1.bias"])
    f = nn.linear(nn.gelu(nn.linear(h, p["linear1.weight"], p["linear1.bias"])),
                  p["linear2.weight"], p["linear2.bias"])
    return nn.layer_norm(h + f, (d,), p["norm2.weight"], p["norm2.bias"])


def transformer_step() -> Layer:
    d = MODEL
    params = {"self_attn.in_proj_weight": (3 * d, d), "self_attn.in_proj_bias": (3 * d,),
              "self_attn.out_proj.weight": (d, d), "self_attn.out_proj.bias": (d,),
              "linear1.weight": (FFN, d), "linear1.bias": (FFN,),
              "linear2.weight": (d, FFN), "linear2.bias": (d,),
              "norm1.weight": (d,), "norm1.bias": (d,), "norm2.weight": (d,), "norm2.bias": (d,)}

    def make_module():
        import torch

        return torch.nn.TransformerEncoderLayer(d, HEADS, FFN, dropout=0.0, activation="gelu",
                                                batch_first=True).train()

    def torch_loss(module, x, mask, target):
        return _F().mse_loss(module(x, src_mask=mask, is_causal=True), target)

    data = (Array("x", (BATCH, SEQ, d)), Array("mask", (SEQ, SEQ), "causal"),
            Array("target", (BATCH, SEQ, d)))
    return _network("train.transformer", f"transformer encoder block training step (causal, "
                    f"{HEADS} heads, FFN {FFN}), {BATCH}x{SEQ}x{d}, mse loss", data, params,
                    lambda x, m, t, ps: tg.nn.mse_loss(_encoder_block(x, m, ps), t),
                    make_module, torch_loss)


def language_model_step(layers: int = 2) -> Layer:
    from tegrad.models import language_model, language_model_shapes

    def make_module():
        from torch_models import LanguageModel

        return LanguageModel(VOCAB, EMBED, HIDDEN, layers)

    def flat_loss(logits, targets):
        return (tg.nn.reshape(logits, (STEPS * LM_BATCH, VOCAB)),
                tg.nn.reshape(targets, (STEPS * LM_BATCH,)))

    def torch_loss(module, tokens, targets):
        return _F().cross_entropy(module(tokens).reshape(-1, VOCAB), targets.reshape(-1))

    data = (Array("tokens", (STEPS, LM_BATCH), "ids", high=VOCAB),
            Array("targets", (STEPS, LM_BATCH), "ids", high=VOCAB))
    return _network("train.lstm_lm", f"LSTM language model training step ({layers} layers, "
                    f"vocabulary {VOCAB}, {EMBED}/{HIDDEN}, {STEPS} steps x {LM_BATCH})", data,
                    language_model_shapes(VOCAB, EMBED, HIDDEN, layers),
                    lambda tok, tgt, ps: tg.nn.cross_entropy(*flat_loss(language_model(tok, ps),
                                                                        tgt)),
                    make_module, torch_loss)


# -- the suite --------------------------------------------------------------------------


def _signature(layer: Layer) -> tuple:
    """What makes two cases the same program: the title without its network, the shapes."""
    return (layer.title, tuple((a.shape, a.kind) for a in layer.inputs))


def cases() -> list[Layer]:
    """Every case, in the networks' order; a shape met again is left out."""
    found: list[Layer] = []
    seen: set = set()
    for layer in [*resnet18_layers(), *resnet50_layers(), *mobilenet_v2_layers(),
                  *unet_layers(), *transformer_layers(), *lstm_lm_layers(),
                  _embedding("embedding.50k", (4096,), 50000, 256), *loss_layers(),
                  resnet_step("resnet18", 8, 64), resnet_step("resnet50", 2, 64),
                  transformer_step(), language_model_step()]:
        if _signature(layer) not in seen:
            seen.add(_signature(layer))
            found.append(layer)
    names = [c.name for c in found]
    assert len(set(names)) == len(names), "case names must be unique"
    return found


def select(all_cases: list[Layer], spec: str | None) -> list[Layer]:
    """``spec``: comma-separated substrings of case names (``resnet18.``, ``dw``)."""
    if not spec:
        return all_cases
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    unknown = [w for w in wanted if not any(w in c.name for c in all_cases)]
    if unknown:
        raise SystemExit(f"--cases: no case name contains {', '.join(unknown)}; the cases: "
                         f"{', '.join(c.name for c in all_cases)}")
    return [c for c in all_cases if any(w in c.name for w in wanted)]
