"""Whole networks from tg.nn against their PyTorch modules, same weights, float64:
the logits, the loss, and the gradient of every parameter (``tegrad.models``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tegrad as tg
from torch_models import language_model_pair, resnet_pair


def compare(loss, logits, params: dict, feeds: dict, module: torch.nn.Module, torch_loss,
            target: str | None = None):
    """Evaluate tegrad's logits, loss and parameter gradients (on ``target``); compare
    with torch's."""
    names = list(params)
    grads = tg.gradient(loss, [params[n] for n in names])
    inputs = [*feeds, *params.values()]
    state = {n: p.detach().numpy() for n, p in module.named_parameters()}
    f = tg.build(inputs, [logits, loss, *grads], target=target)
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
        # 5e-8: batch norm over a 1x1 map (2 values) at the last stage amplifies the
        # rounding of 50 layers summed in different orders (resnet50's layer4.2.conv3
        # weight: 4.6e-9 from torch on the NumPy target, 1.1e-8 on the compiled one, whose
        # vectorized sums add in yet another order; 6e-9 between the two targets)
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(g, expected, rtol=0, atol=5e-8 * scale, err_msg=name)
    return grads


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_resnet_matches_torchvision_layout(arch):
    pair = resnet_pair(arch, classes=5, width=4, image=32, seed=1)
    assert set(pair.params) == {n for n, _ in pair.module.named_parameters()}
    compare(pair.loss, pair.logits, pair.params, pair.feeds, pair.module, pair.torch_loss)


def test_lstm_language_model_matches_torch():
    pair = language_model_pair(vocab=11, embed=6, hidden=7, layers=2, steps=5, batch=3, seed=2)
    assert set(pair.params) == {n for n, _ in pair.module.named_parameters()}
    compare(pair.loss, pair.logits, pair.params, pair.feeds, pair.module, pair.torch_loss)
