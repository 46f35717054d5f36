"""``tw.nn.init``: PyTorch's initialisers, drawing from the cluster's counter-based generator
(``tw.manual_seed`` makes them reproducible). Each rebinds the tensor to its new value and returns it."""

from __future__ import annotations

import math
import warnings

import numpy as np

from tensorwire import random as R
from tensorwire import views as V
from tensorwire.creation import eye, full, rand, randn
from tensorwire.creation import tensor as _tensor
from tensorwire.functions import where
from tensorwire.tensor import Tensor

from ._tensors import no_grad, rebind

__all__ = ["skip_init", "calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
           "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
           "sparse_", "_calculate_fan_in_and_fan_out", "_calculate_correct_fan", "uniform", "normal", "constant",
           "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse", "dirac"]


def calculate_gain(nonlinearity: str, param=None) -> float:
    linear = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    rf = 1
    for s in tensor.shape[2:]:
        rf *= s
    return tensor.shape[1] * rf, tensor.shape[0] * rf


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    """The fan in or out of ``tensor`` as Kaiming's initialisers read it (``mode``: ``"fan_in"`` or ``"fan_out"``)."""
    return _fan(tensor, mode)


def _fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fi, fo = _calculate_fan_in_and_fan_out(tensor)
    return fi if mode == "fan_in" else fo


_SKIP = [0]


class skip_init:  # noqa: N801
    """``with tw.nn.init.skip_init():`` makes every initialiser a no-op (parameters keep their zeros): for
    models whose weights are about to be loaded from a checkpoint, so no random numbers are computed."""

    def __enter__(self):
        _SKIP[0] += 1
        return self

    def __exit__(self, *exc):
        _SKIP[0] -= 1


def _set(tensor: Tensor, new: Tensor) -> Tensor:
    """``tensor`` takes ``new``'s values in place: a view (``p.data``, ``w[0]``) writes them through to its base, as
    torch's initialisers write into the storage they are given."""
    if _SKIP[0]:
        return tensor
    with no_grad():
        if new.dtype is not tensor.dtype:
            new = new.to(tensor.dtype)
        if tensor._base is not None:
            V.assign(tensor, new)
        else:
            rebind(tensor, new)
    return tensor


def _rand(tensor: Tensor, kind: str, generator=None) -> Tensor:
    dt = tensor.dtype if tensor.dtype.is_floating_point else None
    f = rand if kind == "rand" else randn
    return f(tensor.shape, dtype=dt, device=tensor._dev, generator=generator, session=tensor._s)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    if _SKIP[0]:
        return tensor
    return _set(tensor, _rand(tensor, "rand", generator) * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    if _SKIP[0]:
        return tensor
    return _set(tensor, _rand(tensor, "randn", generator) * std + mean)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Normal(mean, std) truncated to [a, b], by rejection: out-of-range draws are redrawn (8 rounds,
    then clamped; with the default ±2 std bounds, the chance an element is still outside is ~1e-11)."""
    if _SKIP[0]:
        return tensor
    x = _rand(tensor, "randn", generator) * std + mean
    for _ in range(8):
        bad = (x < a) | (x > b)
        x = where(bad, _rand(tensor, "randn", generator) * std + mean, x)
    return _set(tensor, x.clamp(a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    if _SKIP[0]:
        return tensor
    return _set(tensor, full(tensor.shape, val, dtype=tensor.dtype, device=tensor._dev, session=tensor._s))


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    if _SKIP[0]:
        return tensor
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _set(tensor, eye(*tensor.shape, dtype=tensor.dtype, device=tensor._dev, session=tensor._s))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    if _SKIP[0]:
        return tensor
    d = tensor.ndim
    if d not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    arr = np.zeros(tensor.shape, dtype=np.float64)
    out_g = tensor.shape[0] // groups
    mind = min(out_g, tensor.shape[1])
    for g in range(groups):
        for i in range(mind):
            idx = (g * out_g + i, i) + tuple(s // 2 for s in tensor.shape[2:])
            arr[idx] = 1
    return _set(tensor, _tensor(arr, dtype=tensor.dtype, device=tensor._dev, session=tensor._s))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fi, fo = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fi + fo))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fi, fo = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fi + fo)), generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix: QR of a normal draw from the cluster, computed on the client (a sync)."""
    if _SKIP[0]:
        return tensor
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _rand(tensor, "randn", generator).reshape(rows, cols)._numpy().astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _set(tensor, _tensor((q * gain).reshape(tensor.shape), dtype=tensor.dtype, device=tensor._dev,
                                session=tensor._s))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """A 2-D ``tensor`` drawn from N(0, std) with ``ceil(sparsity * rows)`` zeros in each column, at rows drawn at
    random per column (Martens 2010; torch's ``sparse_``). The rows are chosen on the client by a numpy generator
    seeded from the tensorwire generator (reproducible under ``tw.manual_seed``; other rows than torch's
    ``randperm``), the values drawn on the cluster."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if _SKIP[0]:
        return tensor
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    seed, off = (generator if generator is not None else R.default_generator).take(1)
    rng = np.random.default_rng([seed % (1 << 63), off])  # (as the data loader's shuffles: no round trip)
    keep = np.ones((rows, cols), dtype=bool)
    for c in range(cols):
        keep[rng.permutation(rows)[:num_zeros], c] = False
    mask = _tensor(keep, device=tensor._dev, session=tensor._s)
    x = _rand(tensor, "randn", generator) * std
    return _set(tensor, where(mask, x, x.new_zeros(())))


def _make_deprecate(meth):
    """torch's deprecated name of ``meth`` (its name without the trailing underscore): warns, then calls it."""
    new_name = meth.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.", FutureWarning,
                      stacklevel=2)
        return meth(*args, **kwargs)

    deprecated_init.__doc__ = f"""{old_name}(...)

    Deprecated in favor of :func:`{new_name}` (a ``FutureWarning``, as torch's); see it for details."""
    deprecated_init.__name__ = old_name
    return deprecated_init


uniform = _make_deprecate(uniform_)
normal = _make_deprecate(normal_)
constant = _make_deprecate(constant_)
xavier_uniform = _make_deprecate(xavier_uniform_)
xavier_normal = _make_deprecate(xavier_normal_)
kaiming_uniform = _make_deprecate(kaiming_uniform_)
kaiming_normal = _make_deprecate(kaiming_normal_)
orthogonal = _make_deprecate(orthogonal_)
sparse = _make_deprecate(sparse_)
dirac = _make_deprecate(dirac_)

# torch's private helpers that some scripts call: the no-grad fills, under their names
_no_grad_uniform_ = uniform_
_no_grad_normal_ = normal_
_no_grad_trunc_normal_ = trunc_normal_
_no_grad_fill_ = constant_
_no_grad_zero_ = zeros_
