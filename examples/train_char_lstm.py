"""Train a character-level LSTM language model with tegrad's eager mode.

    python examples/train_char_lstm.py --steps 300
    python examples/train_char_lstm.py --steps 30 --compare-torch --dtype float64

The text is ``examples/data/lighthouse.txt`` (a public-domain story, 3.6 KB). The model
is ``tg.nn.embedding`` -> ``tg.nn.lstm`` -> ``tg.nn.linear`` -> ``tg.nn.cross_entropy``
on ``tg.Variable``s; a ``tg.GradientTape`` gives the gradients (the LSTM's backward is
the generated VJP of its scan) and ``tegrad.optim`` updates the weights with tegrad ops.
At the end it reports the held-out loss and next-character accuracy and prints a greedy
sample. ``--compare-torch`` trains ``torch.nn.LSTM`` from the same weights on the same
batches and reports the largest relative difference of the loss curves.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import char_lstm_models as cm  # noqa: E402
import train_common as tc  # noqa: E402

DEFAULT_LR = {"sgd": 1.0, "adam": 0.01}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=48, help="characters per sequence")
    parser.add_argument("--embed", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--prompt", default="The keeper ")
    parser.add_argument("--sample", type=int, default=200, help="characters to generate")
    tc.add_common_arguments(parser, steps=300, default_lr=DEFAULT_LR)
    args = parser.parse_args(argv)
    lr = tc.learning_rate(args, DEFAULT_LR)
    with tc.limit_threads(args.threads or None):
        return run(args, lr)


def run(args, lr: float) -> dict:
    start = time.perf_counter()
    corpus = cm.Corpus()
    init = cm.init_parameters(corpus.vocab, args.embed, args.hidden, args.seed, args.dtype)
    batches = corpus.batches(args.steps, args.batch_size, args.length, args.seed)
    what = (f"embed {args.embed}, hidden {args.hidden} / {args.optimizer} (lr {lr:g}) / "
            f"{args.dtype}")
    print(f"text: {len(corpus.text)} characters, vocabulary {corpus.vocab}; {what}; "
          f"{args.steps} steps of {args.batch_size} x {args.length} characters")

    params = cm.variables(init)
    optimizer = tc.tegrad_optimizer(args.optimizer, list(params.values()), lr, args.momentum,
                                    jit=args.jit_optimizer)
    with tc.progress_bar(args.steps, "tegrad", not args.quiet) as bar:
        ours = tc.train_tegrad(cm.loss_fn, params, batches, optimizer, bar)
    valid = corpus.valid_windows(args.length)
    loss, acc = cm.evaluate(params, *valid)
    result = {"accuracy": acc, "valid_loss": loss, "losses": ours.losses,
              "train_s": ours.wall, "steps_per_s": ours.steps_per_second()}
    print(f"tegrad: held-out loss {loss:.3f}, next-character accuracy {acc:.2%}, final "
          f"batch loss {ours.losses[-1]:.4f}, {ours.wall:.1f} s training, "
          f"{ours.steps_per_second():.1f} steps/s")
    runs = [ours]

    if args.compare_torch:
        import torch
        torch.manual_seed(args.seed)
        module = cm.torch_module(init)
        topt = tc.torch_optimizer(args.optimizer, module.parameters(), lr, args.momentum)
        with tc.progress_bar(args.steps, "torch ", not args.quiet) as bar:
            theirs = tc.train_torch(cm.torch_loss_fn, module, batches, topt, bar)
        diff = tc.curve_difference(ours.losses, theirs.losses)
        diff20 = tc.curve_difference(ours.losses, theirs.losses, min(20, args.steps))
        print(f"torch:  final batch loss {theirs.losses[-1]:.4f}, {theirs.wall:.1f} s "
              f"training, {theirs.steps_per_second():.1f} steps/s")
        print(f"loss curves: largest relative difference {diff:.3g} over {args.steps} steps, "
              f"{diff20:.3g} over the first {min(20, args.steps)}")
        result.update(torch_losses=theirs.losses, difference=diff, difference_20=diff20,
                      torch_steps_per_s=theirs.steps_per_second())
        runs.append(theirs)

    sample = cm.generate(params, corpus, args.prompt, args.sample)
    print("greedy sample:\n" + sample)
    result["sample"] = sample
    png = tc.plot_curves(args.out / f"char_lstm_{args.optimizer}.png", runs,
                         f"char LSTM {what}")
    print(f"loss curve: {png}; total {time.perf_counter() - start:.1f} s")
    result["png"] = png
    return result


if __name__ == "__main__":
    main()
