"""Train an MLP or a small CNN on scikit-learn's digits with tegrad's eager mode.

    python examples/train_digits.py --model cnn --optimizer adam --steps 300
    python examples/train_digits.py --model mlp --optimizer sgd --compare-torch --dtype float64

Every forward op is a ``tg.nn`` function on ``tg.Variable``s, the backward comes from a
``tg.GradientTape`` (each op's generated VJP), and the optimizer (``tegrad.optim``) runs
its updates as tegrad eager ops. ``--compare-torch`` trains the same network in PyTorch
from the same initial weights on the same batches (``torch.optim`` with the same
settings) and reports the largest relative difference of the two loss curves; in
float64 they agree to rounding. The loss curves go to ``OUT/digits_MODEL_OPT.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import digits_models as dm  # noqa: E402
import train_common as tc  # noqa: E402

DEFAULT_LR = {"sgd": 0.1, "adam": 0.01}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=dm.MODELS, default="cnn")
    parser.add_argument("--batch-size", type=int, default=64)
    tc.add_common_arguments(parser, steps=300, default_lr=DEFAULT_LR)
    args = parser.parse_args(argv)
    lr = tc.learning_rate(args, DEFAULT_LR)
    with tc.limit_threads(args.threads or None):
        return run(args, lr)


def run(args, lr: float) -> dict:
    start = time.perf_counter()
    data = dm.load_digits_split()
    init = dm.init_parameters(args.model, args.seed, args.dtype)
    indices = dm.batch_indices(len(data["y_train"]), args.batch_size, args.steps, args.seed)
    batches = dm.batches_of(data, indices, args.model, args.dtype)
    what = f"{args.model} / {args.optimizer} (lr {lr:g}) / {args.dtype}"
    print(f"digits: {len(data['y_train'])} train, {len(data['y_test'])} test images; "
          f"{what}; {args.steps} steps of {args.batch_size}")

    params = dm.variables(init)
    optimizer = tc.tegrad_optimizer(args.optimizer, list(params.values()), lr, args.momentum,
                                    jit=args.jit_optimizer)
    with tc.progress_bar(args.steps, "tegrad", not args.quiet) as bar:
        ours = tc.train_tegrad(dm.loss_fn(args.model), params, batches, optimizer, bar)
    acc = dm.accuracy(args.model, params, data["x_test"], data["y_test"])
    result = {"accuracy": acc, "losses": ours.losses, "train_s": ours.wall,
              "steps_per_s": ours.steps_per_second()}
    print(f"tegrad: test accuracy {acc:.2%}, final loss {ours.losses[-1]:.4f}, "
          f"{ours.wall:.1f} s training, {ours.steps_per_second():.1f} steps/s "
          f"(after the first 5 steps, which compile the templates)")
    runs = [ours]

    if args.compare_torch:
        import torch
        torch.manual_seed(args.seed)
        module = dm.torch_module(args.model, init)
        topt = tc.torch_optimizer(args.optimizer, module.parameters(), lr, args.momentum)
        with tc.progress_bar(args.steps, "torch ", not args.quiet) as bar:
            theirs = tc.train_torch(dm.torch_loss_fn, module, batches, topt, bar)
        tacc = dm.torch_accuracy(module, args.model, data["x_test"], data["y_test"])
        diff = tc.curve_difference(ours.losses, theirs.losses)
        diff20 = tc.curve_difference(ours.losses, theirs.losses, min(20, args.steps))
        print(f"torch:  test accuracy {tacc:.2%}, final loss {theirs.losses[-1]:.4f}, "
              f"{theirs.wall:.1f} s training, {theirs.steps_per_second():.1f} steps/s")
        print(f"loss curves: largest relative difference {diff:.3g} over {args.steps} steps, "
              f"{diff20:.3g} over the first {min(20, args.steps)}")
        print(f"speed: tegrad eager {ours.steps_per_second():.1f} steps/s, torch eager "
              f"{theirs.steps_per_second():.1f} steps/s "
              f"(x{theirs.steps_per_second() / ours.steps_per_second():.1f})")
        result.update(torch_accuracy=tacc, torch_losses=theirs.losses, difference=diff,
                      difference_20=diff20, torch_steps_per_s=theirs.steps_per_second())
        runs.append(theirs)

    png = tc.plot_curves(args.out / f"digits_{args.model}_{args.optimizer}.png", runs,
                         f"digits {what}")
    print(f"loss curve: {png}; total {time.perf_counter() - start:.1f} s")
    result["png"] = png
    return result


if __name__ == "__main__":
    main()
