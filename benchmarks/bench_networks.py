"""Whole-network backward graphs: ResNet-18, ResNet-50 (torchvision layout, full width)
and a 2-layer LSTM language model, built from tg.nn. For each: the number of tensors in
the forward and in the generated backward, the time ``tg.gradient`` takes, and the
largest difference from PyTorch (same weights, float64, a small input) over the logits,
the loss and every parameter gradient, relative to each tensor's largest value. (At a
32x32 input the last stage of a ResNet sees a 1x1 map: batch norm over the 2 values of
a batch of 2 is ill-conditioned, and the rounding of 50 layers shows there.)

    .venv/bin/python benchmarks/bench_networks.py [--markdown] [--width 64] [--image 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tegrad as tg
from tegrad.ir.tensor import Compute
from tegrad.ir.traverse import topo_tensors

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import bench_shared  # noqa: E402
from torch_models import language_model_pair, resnet_pair  # noqa: E402


def computes(tensors) -> set:
    return {t for t in topo_tensors(tensors) if isinstance(t, Compute)}


def measure(name, pair):
    loss, logits, params, feeds = pair.loss, pair.logits, pair.params, pair.feeds
    module, torch_loss = pair.module, pair.torch_loss
    names = list(params)
    start = time.perf_counter()
    grads = tg.gradient(loss, [params[n] for n in names])
    generation = time.perf_counter() - start
    forward = computes([loss, logits])
    backward = computes(grads) - forward

    state = {n: p.detach().numpy() for n, p in module.named_parameters()}
    start = time.perf_counter()
    f = tg.build([*feeds, *params.values()], [logits, loss, *grads])
    got = f(*feeds.values(), *(state[n] for n in names))
    run = time.perf_counter() - start
    expected_logits, expected_loss = torch_loss()
    expected_loss.backward()
    reference = dict(module.named_parameters())

    def rel(a, b):
        return float(np.max(np.abs(a - b)) / max(1e-300, float(np.max(np.abs(b)))))
    errors = {"logits": rel(got[0], expected_logits.detach().numpy()),
              "loss": rel(np.asarray(got[1]), expected_loss.detach().numpy())}
    errors.update({n: rel(g, reference[n].grad.numpy())
                   for n, g in zip(names, got[2:], strict=True)})
    worst = max(errors, key=errors.get)
    params_count = sum(int(np.prod(p.shape)) for p in params.values())
    return [name, f"{params_count / 1e6:.2f} M", str(len(forward)), str(len(backward)),
            f"{generation:.2f} s", f"{run:.1f} s", f"{errors[worst]:.1e} ({worst})"]


def resnet_row(arch, width, image):
    pair = resnet_pair(arch, classes=10, width=width, image=image, seed=0)
    return measure(f"{arch} (width {width}, 2x3x{image}x{image})", pair)


def language_model_row():
    layers, hidden, steps = 2, 64, 20
    pair = language_model_pair(vocab=50, embed=32, hidden=hidden, layers=layers, steps=steps,
                               batch=4, seed=0)
    return measure(f"LSTM LM ({layers} layers, hidden {hidden}, {steps} steps)", pair)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--image", type=int, default=64)
    args = parser.parse_args()
    rows = [resnet_row("resnet18", args.width, args.image),
            resnet_row("resnet50", args.width, args.image), language_model_row()]
    bench_shared.print_table(
        "Whole-network backward graphs (float64, vs PyTorch with the same weights)",
        ["network", "params", "forward tensors", "backward tensors", "tg.gradient",
         "build+run", "max rel. diff (where)"], rows, markdown=args.markdown)


if __name__ == "__main__":
    main()
