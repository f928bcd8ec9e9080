"""An LSTM language model as one tensor-expression graph: embedding, a stack of LSTM
layers, a linear decoder; parameter names are those of the PyTorch module

    class LanguageModel(torch.nn.Module):
        embedding = torch.nn.Embedding(vocab, embed)
        lstm      = torch.nn.LSTM(embed, hidden, num_layers=layers)   # seq-first
        decoder   = torch.nn.Linear(hidden, vocab)

so its ``state_dict`` loads by name. Initial states are zero, as torch's default.
"""

from __future__ import annotations

from .. import nn
from ..frontend.math import const
from ..ir.compute import compute
from ..ir.tensor import Tensor, placeholder


def language_model_shapes(vocab: int, embed: int, hidden: int, layers: int = 2
                          ) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"embedding.weight": (vocab, embed)}
    for layer in range(layers):
        inputs = embed if layer == 0 else hidden
        shapes[f"lstm.weight_ih_l{layer}"] = (4 * hidden, inputs)
        shapes[f"lstm.weight_hh_l{layer}"] = (4 * hidden, hidden)
        shapes[f"lstm.bias_ih_l{layer}"] = (4 * hidden,)
        shapes[f"lstm.bias_hh_l{layer}"] = (4 * hidden,)
    shapes["decoder.weight"] = (vocab, hidden)
    shapes["decoder.bias"] = (vocab,)
    return shapes


def language_model_parameters(vocab: int, embed: int, hidden: int, layers: int = 2,
                              dtype: str = "float32") -> dict[str, Tensor]:
    return {name: placeholder(shape, dtype, name=name)
            for name, shape in language_model_shapes(vocab, embed, hidden, layers).items()}


def language_model(tokens: Tensor, params: dict[str, Tensor]) -> Tensor:
    """Logits (L, N, vocab) for ``tokens`` (L, N) int64, sequence first."""
    if tokens.ndim != 2 or not tokens.dtype.startswith("int"):
        raise ValueError(f"language_model: tokens must be (L, N) integers, got "
                         f"{tokens.shape} {tokens.dtype}")
    layers = sum(1 for name in params if name.startswith("lstm.weight_ih_l"))
    x = nn.embedding(tokens, params["embedding.weight"])
    batch = tokens.shape[1]
    for layer in range(layers):
        hidden = params[f"lstm.weight_hh_l{layer}"].shape[1]
        zero = compute((batch, hidden), lambda n, j, dtype=x.dtype: const(0.0, dtype),
                       name=f"zeros.l{layer}")
        x, _, _ = nn.lstm(x, zero, zero, params[f"lstm.weight_ih_l{layer}"],
                       params[f"lstm.weight_hh_l{layer}"], params[f"lstm.bias_ih_l{layer}"],
                       params[f"lstm.bias_hh_l{layer}"], name=f"lstm.l{layer}")
    return nn.linear(x, params["decoder.weight"], params["decoder.bias"])
