"""``torch.nn.modules.rnn``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]
