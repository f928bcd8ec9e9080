"""The operator library: layers written as tensor expressions, their backward generated.

So far the recurrent layers (``recurrent.py``): ``rnn``, ``lstm``, ``gru`` in PyTorch's
layouts, and ``cumsum``, ``cumprod``, ``logcumsumexp`` as scans.
"""

from .recurrent import cumprod, cumsum, gru, logcumsumexp, lstm, rnn

__all__ = ["cumprod", "cumsum", "gru", "logcumsumexp", "lstm", "rnn"]
