"""Whole networks from tg.nn against their PyTorch modules, same weights, float64:
the logits, the loss, and the gradient of every parameter (``tegrad.models``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad.models import (
    language_model,
    language_model_parameters,
    resnet,
    resnet_parameters,
)
from torch_models import LanguageModel, ResNet

F64 = "float64"


def compare(loss, logits, params: dict, feeds: dict, module: torch.nn.Module, torch_loss):
    """Evaluate tegrad's logits, loss and parameter gradients; compare with torch's."""
    names = list(params)
    grads = tg.gradient(loss, [params[n] for n in names])
    inputs = [*feeds, *params.values()]
    state = {n: p.detach().numpy() for n, p in module.named_parameters()}
    f = tg.build(inputs, [logits, loss, *grads])
    got = f(*feeds.values(), *(state[n] for n in names))

    module.zero_grad()
    expected_logits, expected_loss = torch_loss()
    expected_loss.backward()
    np.testing.assert_allclose(got[0], expected_logits.detach().numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got[1], expected_loss.item(), rtol=1e-9)
    reference = dict(module.named_parameters())
    for name, g in zip(names, got[2:], strict=True):
        expected = reference[name].grad.numpy()
        # relative to the tensor's scale (gradients of 1e3 sit beside 1e-2 in one tensor),
        # 1e-8: batch norm over a 1x1 map (2 values) at the last stage amplifies the
        # rounding of 50 layers summed in different orders
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(g, expected, rtol=0, atol=1e-8 * scale, err_msg=name)
    return grads


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_resnet_matches_torchvision_layout(arch):
    torch.manual_seed(0)
    width, classes = 4, 5
    module = ResNet(arch, classes, width).double().train()
    params = resnet_parameters(arch, classes, width, dtype=F64)
    assert set(params) == {n for n, _ in module.named_parameters()}
    x = tg.placeholder((2, 3, 32, 32), F64, name="x")
    target = tg.placeholder((2,), "int64", name="target")
    logits = resnet(x, params, arch)
    loss = tg.nn.cross_entropy(logits, target)

    rng = np.random.default_rng(1)
    xv, tv = rng.standard_normal(x.shape), rng.integers(0, classes, size=2)

    def torch_loss():
        out = module(torch.from_numpy(xv))
        return out, torch.nn.functional.cross_entropy(out, torch.from_numpy(tv))

    compare(loss, logits, params, {x: xv, target: tv}, module, torch_loss)


def test_lstm_language_model_matches_torch():
    torch.manual_seed(0)
    vocab, embed, hidden, layers, steps, batch = 11, 6, 7, 2, 5, 3
    module = LanguageModel(vocab, embed, hidden, layers).double()
    params = language_model_parameters(vocab, embed, hidden, layers, dtype=F64)
    assert set(params) == {n for n, _ in module.named_parameters()}
    tokens = tg.placeholder((steps, batch), "int64", name="tokens")
    targets = tg.placeholder((steps, batch), "int64", name="targets")
    logits = language_model(tokens, params)
    flat = tg.nn.reshape(logits, (steps * batch, vocab))
    loss = tg.nn.cross_entropy(flat, tg.nn.reshape(targets, (steps * batch,)))

    rng = np.random.default_rng(2)
    tok, tgt = (rng.integers(0, vocab, size=(steps, batch)) for _ in range(2))

    def torch_loss():
        out = module(torch.from_numpy(tok))
        return out, torch.nn.functional.cross_entropy(out.reshape(-1, vocab),
                                                      torch.from_numpy(tgt).reshape(-1))

    compare(loss, logits, params, {tokens: tok, targets: tgt}, module, torch_loss)
