"""The digits models of ``train_digits.py``, in tegrad (eager, ``tg.nn`` on Variables)
and in PyTorch, with one set of initial weights and one batch order for both.

- data: scikit-learn's 8x8 digits (1797 images, shipped inside the package), scaled to
  [0, 1], a fixed stratified split (75% train / 25% test, ``random_state=0``);
- ``mlp``: 64 -> 64 (relu) -> 10;
- ``cnn``: conv 3x3 1->8 (pad 1), relu, max pool 2 -> conv 3x3 8->16 (pad 1), relu,
  max pool 2 -> linear 64 -> 10;
- initial weights: PyTorch's default for ``nn.Linear`` / ``nn.Conv2d``
  (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases), drawn with NumPy from
  ``seed``; the parameter names are those of the torch modules below.
"""

from __future__ import annotations

import numpy as np

import tegrad as tg

MODELS = ("mlp", "cnn")
CLASSES = 10


# -- data -------------------------------------------------------------------------------
def load_digits_split(split_seed: int = 0, test_size: float = 0.25) -> dict[str, np.ndarray]:
    """``x_train`` (N, 1, 8, 8) float64 in [0, 1], ``y_train`` (N,) int64, and the test
    half likewise."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float64)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_size, random_state=split_seed, stratify=y)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def batch_indices(n: int, batch_size: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """``steps`` batches of ``batch_size`` indices: a fresh permutation every epoch, the
    remainder dropped (so every batch has one shape, one set of compiled templates)."""
    rng = np.random.default_rng(seed)
    per_epoch = n // batch_size
    out: list[np.ndarray] = []
    while len(out) < steps:
        order = rng.permutation(n)
        out += [order[k * batch_size:(k + 1) * batch_size] for k in range(per_epoch)]
    return out[:steps]


def batches_of(data: dict, indices: list[np.ndarray], model: str, dtype: str) -> list:
    """``(x, y)`` NumPy pairs for the training loops (the MLP sees flat rows)."""
    x = data["x_train"].astype(dtype)
    if model == "mlp":
        x = x.reshape(len(x), -1)
    return [(x[i], data["y_train"][i]) for i in indices]


# -- parameters -------------------------------------------------------------------------
def parameter_shapes(model: str) -> dict[str, tuple[int, ...]]:
    if model == "mlp":
        return {"fc1.weight": (64, 64), "fc1.bias": (64,),
                "fc2.weight": (CLASSES, 64), "fc2.bias": (CLASSES,)}
    if model == "cnn":
        return {"conv1.weight": (8, 1, 3, 3), "conv1.bias": (8,),
                "conv2.weight": (16, 8, 3, 3), "conv2.bias": (16,),
                "fc.weight": (CLASSES, 64), "fc.bias": (CLASSES,)}
    raise ValueError(f"unknown model {model!r} (expected one of {MODELS})")


def init_parameters(model: str, seed: int = 0, dtype: str = "float32"
                    ) -> dict[str, np.ndarray]:
    """PyTorch's default initialisation, drawn with NumPy: a bias shares its layer's
    fan-in (the weight's size divided by its output count)."""
    rng = np.random.default_rng(seed)
    shapes = parameter_shapes(model)
    out = {}
    for name, shape in shapes.items():
        layer = name.rsplit(".", 1)[0]
        weight = shapes[f"{layer}.weight"]
        bound = 1.0 / np.sqrt(int(np.prod(weight[1:])))
        out[name] = rng.uniform(-bound, bound, shape).astype(dtype)
    return out


def variables(params: dict[str, np.ndarray]) -> dict[str, tg.Variable]:
    return {name: tg.Variable(value.copy(), name=name) for name, value in params.items()}


# -- tegrad -----------------------------------------------------------------------------
def forward(model: str, p: dict[str, tg.Variable], x) -> tg.Variable:
    """Logits (N, 10) for ``x``: (N, 64) rows (``mlp``) or (N, 1, 8, 8) images (``cnn``)."""
    nn = tg.nn
    if model == "mlp":
        h = nn.relu(nn.linear(x, p["fc1.weight"], p["fc1.bias"]))
        return nn.linear(h, p["fc2.weight"], p["fc2.bias"])
    h = nn.max_pool2d(nn.relu(nn.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1)), 2)
    h = nn.max_pool2d(nn.relu(nn.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=1)), 2)
    return nn.linear(nn.flatten(h, 1), p["fc.weight"], p["fc.bias"])


def loss_fn(model: str):
    """``(params, x, y) -> mean cross entropy`` for ``train_common.train_tegrad``."""
    def loss(params, x, y):
        x = tg.Variable(x, trainable=False)
        y = tg.Variable(y, trainable=False)
        return tg.nn.cross_entropy(forward(model, params, x), y)
    return loss


def accuracy(model: str, params: dict[str, tg.Variable], x: np.ndarray, y: np.ndarray,
             batch: int = 512) -> float:
    """Test accuracy, the forward pass only (no tape)."""
    if model == "mlp":
        x = x.reshape(len(x), -1)
    dtype = next(iter(params.values())).dtype
    right = 0
    for lo in range(0, len(x), batch):
        logits = forward(model, params, tg.Variable(x[lo:lo + batch].astype(dtype),
                                                    trainable=False))
        right += int((np.argmax(logits.numpy(), axis=1) == y[lo:lo + batch]).sum())
    return right / len(x)


# -- PyTorch ----------------------------------------------------------------------------
def torch_module(model: str, params: dict[str, np.ndarray]):
    """The same network as a ``torch.nn.Module`` holding copies of ``params`` (their
    dtype)."""
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 64)
            self.fc2 = nn.Linear(64, CLASSES)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
            self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
            self.fc = nn.Linear(64, CLASSES)

        def forward(self, x):
            f = nn.functional
            x = f.max_pool2d(torch.relu(self.conv1(x)), 2)
            x = f.max_pool2d(torch.relu(self.conv2(x)), 2)
            return self.fc(torch.flatten(x, 1))

    module = {"mlp": MLP, "cnn": CNN}[model]()
    dtype = next(iter(params.values())).dtype
    module = module.to(getattr(torch, str(dtype)))
    state = {name: torch.from_numpy(np.array(value)) for name, value in params.items()}
    module.load_state_dict(state, strict=True)
    return module


def torch_loss_fn(module, x, y):
    import torch
    return torch.nn.functional.cross_entropy(module(x), y)


def torch_accuracy(module, model: str, x: np.ndarray, y: np.ndarray) -> float:
    import torch
    if model == "mlp":
        x = x.reshape(len(x), -1)
    dtype = next(module.parameters()).dtype
    with torch.no_grad():
        logits = module(torch.from_numpy(x).to(dtype))
    return float((logits.argmax(1).numpy() == y).mean())
