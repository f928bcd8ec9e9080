"""The character-level language model of ``train_char_lstm.py``, in tegrad (eager,
``tg.nn`` on Variables) and in PyTorch, with one set of initial weights and one batch
order for both.

- text: ``examples/data/lighthouse.txt`` (a public-domain story that ships with the repo);
  the last 10% is held out for the validation loss and next-character accuracy;
- model: ``embedding`` (vocab -> E), one ``tg.nn.lstm`` layer (E -> H, sequence first,
  zero initial state), ``linear`` decoder (H -> vocab), mean ``cross_entropy`` over every
  position of every sequence;
- batches: ``N`` windows of ``L + 1`` characters at random offsets (input: the first
  ``L``, target: the last ``L``), drawn with NumPy from ``seed``;
- initial weights: PyTorch's defaults (``nn.Embedding``: N(0, 1); ``nn.LSTM`` and
  ``nn.Linear``: ``U(-1/sqrt(fan), 1/sqrt(fan))`` with fan ``H``), drawn with NumPy;
  the parameter names are those of the torch module below.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tegrad as tg

TEXT = Path(__file__).resolve().parent / "data" / "lighthouse.txt"


# -- data -------------------------------------------------------------------------------
class Corpus:
    """The text as integer codes; ``train`` / ``valid`` split at 90%."""

    def __init__(self, path: Path = TEXT, valid_fraction: float = 0.1):
        self.text = Path(path).read_text(encoding="utf-8")
        self.chars = sorted(set(self.text))
        self.index = {c: k for k, c in enumerate(self.chars)}
        codes = self.encode(self.text)
        cut = int(len(codes) * (1 - valid_fraction))
        self.train, self.valid = codes[:cut], codes[cut:]

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.index[c] for c in text], dtype=np.int64)

    def decode(self, codes) -> str:
        return "".join(self.chars[int(k)] for k in codes)

    def batches(self, steps: int, batch: int, length: int, seed: int = 0) -> list:
        """``(inputs, targets)`` pairs, each (L, N) int64, sequence first."""
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(steps):
            starts = rng.integers(0, len(self.train) - length - 1, size=batch)
            windows = np.stack([self.train[s:s + length + 1] for s in starts], axis=1)
            out.append((windows[:-1], windows[1:]))
        return out

    def valid_windows(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The held-out text cut into consecutive windows: (L, M) inputs and targets."""
        count = (len(self.valid) - 1) // length
        codes = self.valid[:count * length + 1]
        inputs = codes[:-1].reshape(count, length).T
        targets = codes[1:].reshape(count, length).T
        return np.ascontiguousarray(inputs), np.ascontiguousarray(targets)


# -- parameters -------------------------------------------------------------------------
def parameter_shapes(vocab: int, embed: int, hidden: int) -> dict[str, tuple[int, ...]]:
    return {"embedding.weight": (vocab, embed),
            "lstm.weight_ih_l0": (4 * hidden, embed), "lstm.weight_hh_l0": (4 * hidden, hidden),
            "lstm.bias_ih_l0": (4 * hidden,), "lstm.bias_hh_l0": (4 * hidden,),
            "decoder.weight": (vocab, hidden), "decoder.bias": (vocab,)}


def init_parameters(vocab: int, embed: int, hidden: int, seed: int = 0,
                    dtype: str = "float32") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(hidden)
    out = {}
    for name, shape in parameter_shapes(vocab, embed, hidden).items():
        if name == "embedding.weight":
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = rng.uniform(-bound, bound, shape).astype(dtype)
    return out


def variables(params: dict[str, np.ndarray]) -> dict[str, tg.Variable]:
    return {name: tg.Variable(value.copy(), name=name) for name, value in params.items()}


# -- tegrad -----------------------------------------------------------------------------
def forward(p: dict[str, tg.Variable], tokens, state=None):
    """``(logits (L, N, vocab), (h_n, c_n))`` for ``tokens`` (L, N) int64; ``state`` is
    ``(h0, c0)``, zeros when None."""
    nn = tg.nn
    hidden = p["lstm.weight_hh_l0"].shape[1]
    if state is None:
        zeros = np.zeros((tokens.shape[1], hidden), p["lstm.weight_hh_l0"].dtype)
        state = (tg.Variable(zeros, trainable=False), tg.Variable(zeros, trainable=False))
    x = nn.embedding(tokens, p["embedding.weight"])
    out, h_n, c_n = nn.lstm(x, state[0], state[1], p["lstm.weight_ih_l0"],
                            p["lstm.weight_hh_l0"], p["lstm.bias_ih_l0"], p["lstm.bias_hh_l0"])
    return nn.linear(out, p["decoder.weight"], p["decoder.bias"]), (h_n, c_n)


def loss_fn(params, inputs, targets) -> tg.Variable:
    """Mean cross entropy over all (L * N) positions, for ``train_common.train_tegrad``."""
    tokens = tg.Variable(inputs, trainable=False)
    logits, _ = forward(params, tokens)
    length, batch, vocab = logits.shape
    flat_targets = tg.Variable(np.asarray(targets).reshape(-1), trainable=False)
    return tg.nn.cross_entropy(logits.reshape(length * batch, vocab), flat_targets)


def evaluate(params, inputs: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """``(loss, next-character accuracy)`` on held-out windows (forward only)."""
    logits, _ = forward(params, tg.Variable(inputs, trainable=False))
    length, batch, vocab = logits.shape
    flat = logits.reshape(length * batch, vocab)
    loss = tg.nn.cross_entropy(flat, tg.Variable(targets.reshape(-1), trainable=False))
    acc = float((np.argmax(flat.numpy(), axis=1) == targets.reshape(-1)).mean())
    return float(loss), acc


def generate(params, corpus: Corpus, prompt: str, length: int = 200) -> str:
    """Greedy continuation of ``prompt``: the prompt runs through the LSTM once, then one
    character at a time, the state carried along."""
    logits, state = forward(params, tg.Variable(corpus.encode(prompt)[:, None],
                                                trainable=False))
    out = []
    nxt = int(np.argmax(logits.numpy()[-1, 0]))
    for _ in range(length):
        out.append(nxt)
        logits, state = forward(params, tg.Variable(np.array([[nxt]], np.int64),
                                                    trainable=False), state)
        nxt = int(np.argmax(logits.numpy()[-1, 0]))
    return prompt + corpus.decode(out)


# -- PyTorch ----------------------------------------------------------------------------
def torch_module(params: dict[str, np.ndarray]):
    """The same model as a ``torch.nn.Module`` holding copies of ``params``."""
    import torch
    from torch import nn

    vocab, embed = params["embedding.weight"].shape
    hidden = params["lstm.weight_hh_l0"].shape[1]

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden)  # sequence first
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, tokens):
            out, _ = self.lstm(self.embedding(tokens))
            return self.decoder(out)

    dtype = params["embedding.weight"].dtype
    module = CharLM().to(getattr(torch, str(dtype)))
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()},
                           strict=True)
    return module


def torch_loss_fn(module, inputs, targets):
    import torch
    logits = module(inputs)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))
