"""Recurrent layers with torch's names, shapes, gate order, initialisation and outputs: ``RNN``, ``LSTM``, ``GRU``
and the single-step ``RNNCell``, ``LSTMCell``, ``GRUCell``.

A layer projects the whole input sequence with one ``linear`` per layer and direction, then runs the recurrence
as ONE ``rnn_scan`` op (:mod:`tensorwire.protocol.ops.recurrent`): the CPU runs it in one kernel, other backends
through its decomposition; its gradient is one ``rnn_scan_grad`` plus one product for the weight, as cuDNN's RNN
does. A cell is a scan of one step. Only an LSTM with ``proj_size`` records its steps one by one. Nothing syncs.

A layer also takes a :class:`~tensorwire.nn.utils.rnn.PackedSequence` (sequences of different lengths), as torch's:
each direction runs its scan over the padded batch (gathered from the packed rows by one ``index_select``) in which
the backward direction's sequences are reversed each within its own length, so both directions start where torch's
do; the outputs are gathered back to packed rows and the final states from each sequence's last valid step. Steps
past a sequence's end are computed but read by nothing: their gradient is zero, so they add nothing to any other.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from tensorwire.creation import tensor
from tensorwire.functions import cat, stack
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.ops.recurrent import GATES
from tensorwire.tensor import Tensor

from . import functional as F
from . import init
from .layers import _param
from .module import Module
from .utils.rnn import PackedSequence, batch_sizes_of

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {mode.upper(): g for mode, g in GATES.items()}  # torch's mode names: "LSTM", "GRU", "RNN_TANH", ...


# ------------------------------------------------------------------------------------------------ the recurrence


def _packed(mode: str, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None,
            reverse: bool) -> Tensor:
    """The recurrence over the time-major input projection ``gi`` ``[T, B, G*H]`` (``x W_ih^T + b_ih``) from ``h``
    (and ``c``) as one ``rnn_scan``: its packed output ``[T, B, S]`` (each step's ``h`` in ``[:H]``, an LSTM's ``c``
    in ``[H:2H]``)."""
    if gi.dtype is not w_hh.dtype:  # an autocast input projection
        gi = gi.to(w_hh.dtype)
    if b_hh is None:
        b_hh = w_hh.new_zeros(w_hh.shape[0])
    ins = [gi, h] + ([c] if mode == "LSTM" else []) + [w_hh, b_hh]
    return gi._rec("rnn_scan", ins, {"mode": mode.lower(), "reverse": reverse})


def _cell(mode: str, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None
          ) -> tuple[Tensor, Tensor | None]:
    """:func:`_packed`'s recurrence over the one step of a cell (``gi`` ``[B, G*H]``: the scan's one-step form, whose
    result is ``[B, S]``, no reshape on either side): ``(h' [B, H], c' or None)``."""
    last = _packed(mode, gi, h, c, w_hh, b_hh, False)
    H = h.shape[-1]
    return last[:, :H], (last[:, H:2 * H] if mode == "LSTM" else None)


def _layer_scan(mode: str, gi: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor, b_hh: Tensor | None,
                reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`_packed`'s recurrence for a layer: ``(outputs [T, B, H], final h [1, B, H], final c [1, B, H] or
    None)``, the final states as one slice each of the last step's row, in the shape the layer's ``h_n``/``c_n``
    join them in (a ``cat``, not a ``stack``: no ``[B, H]`` step between, ~3 recorded ops fewer a layer)."""
    y = _packed(mode, gi, h, c, w_hh, b_hh, reverse)
    H = h.shape[-1]
    t = 0 if reverse else y.shape[0] - 1
    return y[:, :, :H], y[t:t + 1, :, :H], (y[t:t + 1, :, H:2 * H] if mode == "LSTM" else None)


# an LSTM with a projection records one step at a time (the scan has no projection): ``gi`` is the step's input
# projection, and the function adds the hidden projection and returns the new state, with torch's formulas


def _lstm_step(
    gi: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Gates in torch's order i, f, g, o: ``c' = f c + i g``, ``h' = o tanh(c')`` (then ``h' W_hr^T`` with a
    projection)."""
    gates = F.linear(h, w_hh, b_hh) + gi
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _check_dtype(kind: str, x: Tensor, w: Tensor) -> None:
    if x.dtype is not w.dtype:
        raise DTypeError(
            f"{kind} input dtype ({x.dtype}) does not match weight dtype ({w.dtype}). Convert input: "
            f"input.to({w.dtype}), or convert model: model.to({x.dtype})"
        )


class _PackedRows:
    """The gathers between a packed batch's rows and the padded time-major batch ``[T, B]`` its recurrences run on,
    for batch sizes ``bs`` (sequences sorted by decreasing length; row ``offsets[t] + b`` holds step ``t`` of
    sequence ``b``). The indices are computed here and uploaded once each, as a forward pass first needs them
    (every layer and direction shares them)."""

    def __init__(self, bs: np.ndarray, like: Tensor):
        self.like = like
        T, B = bs.size, int(bs[0])
        self.T, self.B = T, B
        lens = (bs[None, :] > np.arange(B)[:, None]).sum(1)  # each sequence's length
        offsets = np.concatenate([[0], np.cumsum(bs)[:-1]])
        t, b = np.arange(T)[:, None], np.arange(B)[None, :]
        valid = t < lens[None, :]
        back = np.maximum(lens[None, :] - 1 - t, 0)  # the step read at reversed step t
        tt, jj = np.nonzero(valid)  # each packed row's step and sequence, in the packed order
        self._np = {
            # padded position (t, b) <- packed row; a position past the sequence's end reads its first step (any
            # valid row does: nothing reads what the scan makes of it)
            "in": np.where(valid, offsets[t] + b, b),
            "in_rev": np.where(valid, offsets[back] + b, b),
            # packed row (t, b) <- padded position (its step t, or its step len - 1 - t reversed)
            "out": tt * B + jj,
            "out_rev": (lens[jj] - 1 - tt) * B + jj,
            # each sequence's last valid step (in either direction's scan)
            "last": (lens - 1) * B + np.arange(B),
        }
        self._idx: dict[str, Tensor] = {}

    def _index(self, name: str) -> Tensor:
        t = self._idx.get(name)
        if t is None:
            like = self.like
            t = self._idx[name] = tensor(self._np[name].reshape(-1).astype(np.int64), device=like._dev,
                                         session=like._s)
        return t

    def padded(self, rows: Tensor, reverse: bool) -> Tensor:
        """Packed rows ``[N, W]`` as the padded ``[T, B, W]`` (each sequence reversed within its length with
        ``reverse``)."""
        return rows.index_select(0, self._index("in_rev" if reverse else "in")).reshape(self.T, self.B,
                                                                                          rows.shape[-1])

    def flat(self, y: Tensor) -> Tensor:
        """A padded ``[T, B, W]`` as its ``[T*B, W]`` rows."""
        return y.reshape(self.T * self.B, y.shape[-1])

    def packed(self, flat: Tensor, reverse: bool) -> Tensor:
        """The packed rows ``[N, W]`` of :meth:`flat` rows (of a scan over :meth:`padded` ``(reverse)``)."""
        return flat.index_select(0, self._index("out_rev" if reverse else "out"))

    def last(self, flat: Tensor) -> Tensor:
        """Each sequence's row at its last valid step ``[B, W]`` (the final state of either direction's scan)."""
        return flat.index_select(0, self._index("last"))


# ------------------------------------------------------------------------------------------------ layers


class RNNBase(Module):
    """The multi-layer recurrent layer behind ``RNN``, ``LSTM`` and ``GRU`` (``mode`` is torch's: ``"LSTM"``,
    ``"GRU"``, ``"RNN_TANH"`` or ``"RNN_RELU"``).

    Parameters per layer ``k`` and direction (suffix ``_reverse`` for the backward one), registered in torch's
    order: ``weight_ih_l{k}`` ``[G*H, in]``, ``weight_hh_l{k}`` ``[G*H, H]``, ``bias_ih_l{k}``, ``bias_hh_l{k}``
    ``[G*H]`` (with ``bias``), ``weight_hr_l{k}`` ``[P, H]`` (LSTM with ``proj_size=P``), all drawn from
    ``U(-1/sqrt(H), 1/sqrt(H))``. A ``state_dict`` of torch's module loads as it is.
    """

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                stacklevel=2,
            )
        for name, v in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} should be of type bool, got: {type(v).__name__}")
        for name, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} should be of type int, got: {type(v).__name__}")
            if v <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        nd = 2 if bidirectional else 1
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(nd):
                layer_in = input_size if layer == 0 else real_hidden * nd
                sfx = f"l{layer}" + ("_reverse" if direction else "")
                shapes = {f"weight_ih_{sfx}": (gate_size, layer_in), f"weight_hh_{sfx}": (gate_size, real_hidden)}
                if bias:
                    shapes.update({f"bias_ih_{sfx}": (gate_size,), f"bias_hh_{sfx}": (gate_size,)})
                if proj_size > 0:
                    shapes[f"weight_hr_{sfx}"] = (proj_size, hidden_size)
                for name, shape in shapes.items():
                    setattr(self, name, _param(*shape, device=device, dtype=dtype))
                self._flat_weights_names.extend(shapes)
                self._all_weights.append(list(shapes))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias from ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``, as torch."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    @property
    def _flat_weights(self) -> list[Tensor]:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """The parameters per layer and direction, as torch's ``all_weights``."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """Accepted for torch programs (it packs weights for cuDNN); the cluster's parameters need no packing."""

    def _weights(self, layer: int, direction: int) -> tuple:
        sfx = f"l{layer}" + ("_reverse" if direction else "")
        g = lambda n: getattr(self, f"{n}_{sfx}", None)  # noqa: E731
        return g("weight_ih"), g("weight_hh"), g("bias_ih"), g("bias_hh"), g("weight_hr")

    def _expected_hidden(self, batch: int, cell: bool = False) -> tuple[int, int, int]:
        nd = 2 if self.bidirectional else 1
        size = self.hidden_size if cell or self.proj_size == 0 else self.proj_size
        return self.num_layers * nd, batch, size

    def _first_weight(self) -> Tensor:
        """``_flat_weights[0]`` (whose dtype the inputs must have) without building the whole list."""
        return getattr(self, self._flat_weights_names[0])

    def _check_input(self, x: Tensor) -> None:
        _check_dtype(type(self).__name__, x, self._first_weight())
        if x.shape[-1] != self.input_size:
            raise ShapeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {x.shape[-1]}"
            )

    def _prepare(self, input, hx):  # noqa: A002
        """(time-major-or-batch-first 3-D input, batched, [initial states] checked and batched)."""
        kind = self._kind()
        if not isinstance(input, Tensor):
            raise TypeError(f"{kind}: expected a Tensor or a PackedSequence input, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{kind}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(0 if self.batch_first else 1)
        self._check_input(x)
        batch = x.shape[0] if self.batch_first else x.shape[1]
        return x, batched, self._initial_states(x, hx, batch, batched)

    def _kind(self) -> str:
        return "LSTM" if self.mode == "LSTM" else type(self).__name__

    def _initial_states(self, x: Tensor, hx, batch: int, batched: bool) -> list[Tensor]:
        """The initial states ``[D*num_layers, batch, H]`` (zeros for ``hx=None``), checked as torch checks them
        (unbatched ones given a batch dim of 1)."""
        kind = self._kind()
        n_states = 2 if self.mode == "LSTM" else 1
        if hx is None:
            return [x.new_zeros(*self._expected_hidden(batch, cell=i == 1)) for i in range(n_states)]
        states = list(hx) if n_states == 2 else [hx]
        if len(states) != n_states or not all(isinstance(s, Tensor) for s in states):
            want = "a tuple (h_0, c_0) of Tensors" if n_states == 2 else "a Tensor"
            raise TypeError(f"{kind}: hx should be {want}")
        want = 3 if batched else 2
        if any(s.ndim != want for s in states):
            got = ", ".join(f"{s.ndim}-D" for s in states)
            what, got = ("hx and cx", f"({got}) tensors") if n_states == 2 else ("hx", f"{got} tensor")
            raise ShapeError(
                f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, {what} should also be "
                f"{want}-D but got {got}"
            )
        if not batched:
            states = [s.unsqueeze(1) for s in states]
        for i, s in enumerate(states):
            exp = self._expected_hidden(batch, cell=i == 1)
            if tuple(s.shape) != exp:
                what = "Expected hidden[1] size {}, got {}" if i == 1 else "Expected hidden size {}, got {}"
                raise ShapeError(what.format(exp, list(s.shape)))
            _check_dtype(kind, s, self._first_weight())
        return states

    def _projected_steps(self, gi: Tensor, h: Tensor, c: Tensor, weights, reverse: bool, every_c: bool = False):
        """An LSTM with ``proj_size``, step by step over the time-major ``gi``: (outputs [T, B, P], final h
        [1, B, P], final c [1, B, H]; with ``every_c``, every step's c [T, B, H] instead)."""
        _, w_hh, _, b_hh, w_hr = weights
        steps = range(gi.shape[0] - 1, -1, -1) if reverse else range(gi.shape[0])
        outs: list[Tensor | None] = [None] * gi.shape[0]
        cs: list[Tensor | None] = [None] * gi.shape[0]
        for t in steps:
            h, c = _lstm_step(gi[t], h, c, w_hh, b_hh, w_hr)
            outs[t], cs[t] = h, c
        return stack(outs, 0), h.unsqueeze(0), (stack(cs, 0) if every_c else c.unsqueeze(0))

    def forward(self, input, hx=None):  # noqa: A002
        """``(output, h_n)`` (``(output, (h_n, c_n))`` for LSTM); ``output`` is ``[L, N, D*H_out]`` (``[N, L, ...]``
        with ``batch_first``, ``[L, D*H_out]`` unbatched), ``h_n``/``c_n`` are ``[D*num_layers, N, H]`` ordered layer
        by layer, forward direction first. A :class:`PackedSequence` input gives a ``PackedSequence`` output (its
        ``batch_sizes`` and indices) and each sequence's state after its own last step (its first, going
        backward), in the caller's order, as torch's."""
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        x, batched, states = self._prepare(input, hx)
        if self.batch_first:
            x = x.transpose(0, 1)  # time-major for the scans
        x, hn, cn = self._run(x, states)
        if self.batch_first:
            x = x.transpose(0, 1)
        tdim = 1 if self.batch_first else 0
        out = x if batched else x.squeeze(1 - tdim)  # the batch dim
        if not batched:
            hn = hn.squeeze(1)
        if self.mode != "LSTM":
            return out, hn
        return out, (hn, cn if batched else cn.squeeze(1))

    def _run(self, x: Tensor, states: list[Tensor]) -> tuple[Tensor, Tensor, Tensor | None]:
        """Every layer over the time-major ``x`` ``[T, B, in]`` from ``states``: (output ``[T, B, D*H_out]``, h_n,
        c_n or None)."""
        nd = 2 if self.bidirectional else 1
        h0 = states[0].unbind(0)
        c0 = states[1].unbind(0) if self.mode == "LSTM" else [None] * len(h0)
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(nd):
                weights = self._weights(layer, direction)
                gi = F.linear(x, weights[0], weights[2])  # the whole sequence's input projection at once
                k = layer * nd + direction
                if self.proj_size:
                    out, h, c = self._projected_steps(gi, h0[k], c0[k], weights, reverse=direction == 1)
                else:
                    out, h, c = _layer_scan(self.mode, gi, h0[k], c0[k], weights[1], weights[3], direction == 1)
                outs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outs[0] if nd == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        hn = cat(h_n, 0)  # (each [1, B, H]; one layer's: a copy, never a view of the output it overlaps)
        return x, hn, (cat(c_n, 0) if self.mode == "LSTM" else None)

    def _forward_packed(self, packed: PackedSequence, hx):
        """:meth:`forward` of a :class:`PackedSequence` (``data`` ``[N, in]``, sorted by decreasing length)."""
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        if not isinstance(data, Tensor):
            raise TypeError(f"{self._kind()}: the PackedSequence's data must be a Tensor, got {type(data).__name__}")
        if data.ndim != 2:
            raise ShapeError(f"input must have 2 dimensions, got {data.ndim}")
        self._check_input(data)
        bs = batch_sizes_of(packed)
        T, B, N = bs.size, int(bs[0]), int(bs.sum())
        if data.shape[0] != N:
            raise ShapeError(f"the PackedSequence's data has {data.shape[0]} rows, its batch_sizes sum to {N}")
        states = self._initial_states(data, hx, B, True)
        if hx is not None and sorted_indices is not None:
            states = [s.index_select(1, sorted_indices) for s in states]  # (the caller's order -> the packed one)
        if bs[-1] == B:  # every sequence as long: the packed rows are the time-major batch's
            out, hn, cn = self._run(data.reshape(T, B, data.shape[1]), states)
            out = out.reshape(N, out.shape[-1])
        else:
            out, hn, cn = self._run_packed(data, bs, states)
        if unsorted_indices is not None:
            hn = hn.index_select(1, unsorted_indices)
            cn = cn.index_select(1, unsorted_indices) if cn is not None else None
        result = PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices)
        return (result, hn) if self.mode != "LSTM" else (result, (hn, cn))

    def _run_packed(self, x: Tensor, bs: np.ndarray, states: list[Tensor]) -> tuple[Tensor, Tensor, Tensor | None]:
        """Every layer over the packed rows ``x`` ``[N, in]`` of sequences of different lengths (``bs``: the batch
        sizes): (packed output ``[N, D*H_out]``, h_n, c_n or None). Each direction projects the packed rows, gathers
        the projection into the padded ``[T, B, G*H]`` batch (the backward direction's with each sequence reversed
        within its length, so that one forward scan starts it at its last step), scans it, and gathers its packed
        output and its final states (each sequence's last valid step) back; the padded steps' states are read by
        nothing, so their gradients are zeros."""
        rows = _PackedRows(bs, x)
        nd = 2 if self.bidirectional else 1
        h0 = states[0].unbind(0)
        c0 = states[1].unbind(0) if self.mode == "LSTM" else [None] * len(h0)
        H = self.hidden_size
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(nd):
                weights = self._weights(layer, direction)
                gi = rows.padded(F.linear(x, weights[0], weights[2]), direction == 1)
                k = layer * nd + direction
                if self.proj_size:
                    y_h, _, y_c = self._projected_steps(gi, h0[k], c0[k], weights, False, every_c=True)
                else:
                    y = _packed(self.mode, gi, h0[k], c0[k], weights[1], weights[3], False)
                    y_h, y_c = y[:, :, :H], (y[:, :, H:2 * H] if self.mode == "LSTM" else None)
                flat = rows.flat(y_h)
                outs.append(rows.packed(flat, direction == 1))
                h_n.append(rows.last(flat))
                c_n.append(rows.last(rows.flat(y_c)) if y_c is not None else None)
            x = outs[0] if nd == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, stack(h_n, 0), (stack(c_n, 0) if self.mode == "LSTM" else None)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """torch's ``nn.RNN``: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (``nonlinearity="relu"`` for
    ReLU). Arguments as torch: ``RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(
            mode,
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """torch's ``nn.LSTM`` (gates i, f, g, o; optional ``proj_size``): ``forward(input, (h_0, c_0)=None)`` returns
    ``(output, (h_n, c_n))``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device=device,
            dtype=dtype,
        )


class GRU(RNNBase):
    """torch's ``nn.GRU`` (gates r, z, n, ``b_hn`` inside the reset product): ``forward(input, h_0=None)`` returns
    ``(output, h_n)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "GRU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )


# ------------------------------------------------------------------------------------------------ cells


class RNNCellBase(Module):
    """One recurrent step: ``weight_ih`` ``[G*H, in]``, ``weight_hh`` ``[G*H, H]``, ``bias_ih``/``bias_hh``
    ``[G*H]``, all from ``U(-1/sqrt(H), 1/sqrt(H))``, as torch."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = num_chunks * hidden_size
        self.weight_ih = _param(g, input_size, device=device, dtype=dtype)
        self.weight_hh = _param(g, hidden_size, device=device, dtype=dtype)
        if bias:
            self.bias_ih = _param(g, device=device, dtype=dtype)
            self.bias_hh = _param(g, device=device, dtype=dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _prepare(self, input, hx, n_states: int):  # noqa: A002
        """(batched input, batched states, batched?) with torch's checks; missing states are zeros."""
        # (read through the tensors' ``_shape`` tuples: a cell runs this every time step, and ``.shape`` / ``.ndim``
        # make a ``Size`` each)
        kind = type(self).__name__
        shape = input._shape
        if len(shape) not in (1, 2):
            raise ValueError(f"{kind}: Expected input to be 1D or 2D, got {len(shape)}D instead")
        _check_dtype(kind, input, self.weight_ih)
        if shape[-1] != self.input_size:
            raise ShapeError(f"input has inconsistent input_size: got {shape[-1]} expected {self.input_size}")
        batched = len(shape) == 2
        x = input if batched else input.unsqueeze(0)
        want = (x._shape[0], self.hidden_size)
        if hx is None:
            z = x.new_zeros(*want)
            return x, [z] * n_states, batched
        states = list(hx) if n_states == 2 else [hx]
        for i, s in enumerate(states):
            if len(s._shape) not in (1, 2):
                what = f"hx[{i}]" if n_states == 2 else "hidden"
                raise ValueError(f"{kind}: Expected {what} to be 1D or 2D, got {len(s._shape)}D instead")
        if not batched:
            states = [s.unsqueeze(0) for s in states]
        for s in states:
            if s._shape != want:
                raise ShapeError(f"{kind}: Expected hidden size {want}, got {list(s._shape)}")
        return x, states, batched

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """torch's ``nn.RNNCell``: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", device=None, dtype=None
    ):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):  # noqa: A002
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {self.nonlinearity}")
        x, (h,), batched = self._prepare(input, hx, 1)
        mode = "RNN_RELU" if self.nonlinearity == "relu" else "RNN_TANH"
        h, _ = _cell(mode, F.linear(x, self.weight_ih, self.bias_ih), h, None, self.weight_hh,
                     self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """torch's ``nn.LSTMCell``: ``forward(input, (h, c)=None)`` returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):  # noqa: A002
        x, (h, c), batched = self._prepare(input, hx, 2)
        h, c = _cell("LSTM", F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                     self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """torch's ``nn.GRUCell``: ``forward(input, h=None)`` returns ``h'``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):  # noqa: A002
        x, (h,), batched = self._prepare(input, hx, 1)
        h, _ = _cell("GRU", F.linear(x, self.weight_ih, self.bias_ih), h, None, self.weight_hh,
                     self.bias_hh)
        return h if batched else h.squeeze(0)
