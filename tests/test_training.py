"""Training end to end in eager mode (issue 7, part 4): ``tegrad.optim`` against
``torch.optim`` update by update, the digits MLP and CNN and the character LSTM of
``examples/`` against the same models trained in PyTorch (float64, same initial weights
and batches: the loss curves agree to 1e-4 relative, in practice to rounding), and the
digits CNN reaching 95% test accuracy at a small budget."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad.optim import SGD, Adam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import char_lstm_models as cm  # noqa: E402
import digits_models as dm  # noqa: E402
import train_common as tc  # noqa: E402

CURVE_STEPS = 20
CURVE_RTOL = 1e-4


@pytest.fixture(autouse=True)
def one_thread():
    """One BLAS / torch thread: small products, a shared 2-core machine (see
    ``train_common``)."""
    with tc.limit_threads(1):
        yield


# -- the optimizers alone -----------------------------------------------------------------
OPTIMIZER_CASES = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("sgd", dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name,settings", OPTIMIZER_CASES,
                         ids=[f"{n}-{'-'.join(s)}" for n, s in OPTIMIZER_CASES])
def test_optimizer_matches_torch(name, settings, jit):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((5, 3)), rng.standard_normal((4,)), rng.standard_normal(())]
    ours = [tg.Variable(a.copy()) for a in init]
    theirs = [torch.tensor(a, requires_grad=True) for a in init]
    opt = (SGD if name == "sgd" else Adam)(ours, jit=jit, **settings)
    topt = (torch.optim.SGD if name == "sgd" else torch.optim.Adam)(theirs, **settings)
    for step in range(12):
        grads = [np.sin(3 * np.asarray(p) + step) for p in ours]
        if step == 3:
            grads[1] = None  # no gradient: the parameter and its state stay as they are
        opt.step(grads)
        for t, g in zip(theirs, grads, strict=True):
            t.grad = None if g is None else torch.tensor(g)
        topt.step()
        for p, t in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(np.asarray(p), t.detach().numpy(), rtol=1e-13,
                                       atol=1e-15, err_msg=f"step {step}")


def test_optimizer_keeps_dtype_and_one_template_per_shape():
    from tegrad.function import cache_info

    p = tg.Variable(np.ones((3, 2), np.float32))
    opt = Adam([p], lr=0.1)
    opt.step([np.ones((3, 2), np.float32)])
    misses = cache_info().misses
    for _ in range(5):  # new bias corrections every step: 0-d inputs, no new template
        opt.step([np.ones((3, 2), np.float32)])
    assert cache_info().misses == misses
    assert p.dtype == "float32" and p.trainable


def test_optimizer_rejects_bad_input():
    p = tg.Variable(np.ones(3))
    with pytest.raises(ValueError, match="gradients for"):
        SGD([p], lr=0.1).step([])
    with pytest.raises(ValueError, match="shape"):
        SGD([p], lr=0.1).step([np.ones(4)])
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="float"):
        SGD([tg.Variable(np.arange(3))], lr=0.1)


def test_step_inside_a_tape_is_not_recorded():
    w, other = tg.Variable(np.array([1.0, 2.0])), tg.Variable(np.array([3.0]))
    opt = SGD([w, other], lr=0.5)
    with tg.GradientTape() as tape:
        opt.step([np.ones(2), np.ones(1)])
        loss = (w * w).sum()
    assert [v.name for v in tape.watched_variables()] == [w.name]  # not `other`
    np.testing.assert_allclose(np.asarray(w), [0.5, 1.5])
    np.testing.assert_allclose(np.asarray(tape.gradient(loss, w)), [1.0, 3.0])


def test_gradient_uses_values_read_before_an_update():
    w = tg.Variable(np.array([1.0, 2.0]))
    with tg.GradientTape() as tape:
        loss = (w * w).sum()
    SGD([w], lr=0.5).step([np.ones(2)])
    np.testing.assert_allclose(np.asarray(tape.gradient(loss, w)), [2.0, 4.0])


# -- loss curves against PyTorch (float64) -----------------------------------------------
def _digits_curves(model: str, optimizer: str, steps: int):
    data = dm.load_digits_split()
    init = dm.init_parameters(model, seed=0, dtype="float64")
    indices = dm.batch_indices(len(data["y_train"]), 64, steps, seed=0)
    batches = dm.batches_of(data, indices, model, "float64")
    lr = {"sgd": 0.1, "adam": 0.01}[optimizer]
    params = dm.variables(init)
    ours = tc.train_tegrad(dm.loss_fn(model), params, batches,
                           tc.tegrad_optimizer(optimizer, list(params.values()), lr))
    module = dm.torch_module(model, init)
    theirs = tc.train_torch(dm.torch_loss_fn, module, batches,
                            tc.torch_optimizer(optimizer, module.parameters(), lr))
    return ours.losses, theirs.losses


@pytest.mark.parametrize("optimizer", tc.OPTIMIZERS)
@pytest.mark.parametrize("model", dm.MODELS)
def test_digits_loss_curve_matches_torch(model, optimizer):
    ours, theirs = _digits_curves(model, optimizer, CURVE_STEPS)
    assert theirs[-1] < theirs[0]  # it trains
    assert tc.curve_difference(ours, theirs) <= CURVE_RTOL, (ours, theirs)


@pytest.mark.parametrize("optimizer", tc.OPTIMIZERS)
def test_char_lstm_loss_curve_matches_torch(optimizer):
    corpus = cm.Corpus()
    init = cm.init_parameters(corpus.vocab, embed=8, hidden=16, seed=0, dtype="float64")
    batches = corpus.batches(steps=6, batch=4, length=10, seed=0)
    lr = {"sgd": 1.0, "adam": 0.01}[optimizer]
    params = cm.variables(init)
    ours = tc.train_tegrad(cm.loss_fn, params, batches,
                           tc.tegrad_optimizer(optimizer, list(params.values()), lr))
    module = cm.torch_module(init)
    theirs = tc.train_torch(cm.torch_loss_fn, module, batches,
                            tc.torch_optimizer(optimizer, module.parameters(), lr))
    assert tc.curve_difference(ours.losses, theirs.losses) <= CURVE_RTOL
    for name, p in module.named_parameters():  # the weights after training too
        np.testing.assert_allclose(np.asarray(params[name]), p.detach().numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=name)


# -- the examples end to end ----------------------------------------------------------------
def test_digits_cnn_reaches_95_percent(tmp_path):
    """The CI budget: 300 Adam steps of 64 images in float32 (about 10 s here)."""
    import train_digits

    result = train_digits.main(["--model", "cnn", "--optimizer", "adam", "--steps", "300",
                                "--quiet", "--out", str(tmp_path)])
    assert result["accuracy"] >= 0.95, result["accuracy"]
    assert result["png"].exists() and result["png"].stat().st_size > 0


def test_char_lstm_script_compares_and_samples(tmp_path):
    import train_char_lstm

    result = train_char_lstm.main(["--steps", "4", "--hidden", "12", "--embed", "6",
                                   "--length", "8", "--batch-size", "3", "--dtype", "float64",
                                   "--sample", "20", "--prompt", "Ada ", "--compare-torch",
                                   "--quiet", "--out", str(tmp_path)])
    assert result["difference"] <= CURVE_RTOL
    assert result["sample"].startswith("Ada ") and len(result["sample"]) == 24
    assert 0.0 <= result["accuracy"] <= 1.0
    assert result["png"].exists()
