"""Layers: linear, convolution, pooling, normalisation, embedding, dropout, shape and activation modules."""

from __future__ import annotations

import math
import warnings

from tensorwire.autograd_hooks import record as _record
from tensorwire.creation import empty, ones, tensor, zeros
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor

from . import functional as F
from . import init
from ._tensors import no_grad, rebind
from .activations import _softmax_dim
from .linear_maps import linear as _linear
from .module import Module, own_attr
from .parameter import Parameter
from .tuples import _single


def _empty(*shape, device=None, dtype=None) -> Tensor:
    return empty(*shape, dtype=dtype, device=device)


def _param(*shape, device=None, dtype=None) -> Parameter:
    return Parameter(_empty(*shape, device=device, dtype=dtype))


class _Hyper(Module):
    """A layer without parameters whose keyword hyperparameters become attributes; ``extra_repr`` lists the
    ones named in ``_repr`` as ``name=value``."""

    _repr: tuple[str, ...] = ()
    _fn = ""  # forward: F.<_fn>(input, *(the attributes named in _args))
    _args: tuple[str, ...] = ()

    def __init__(self, **hyper):
        super().__init__()
        for k, v in hyper.items():
            setattr(self, k, v)

    def forward(self, input):  # noqa: A002
        return getattr(F, self._fn)(input, *[getattr(self, a) for a in self._args])

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k in self._repr)


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input


class Linear(Module):
    """``y = x W^T + b`` with torch's initialisation (Kaiming-uniform weight, uniform bias)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = _param(out_features, in_features, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_features, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):  # noqa: A002
        if type(self) is Linear:  # (no class attribute named weight or bias: read without the failed lookup first)
            w, b = own_attr(self, "weight"), own_attr(self, "bias")
            if isinstance(input, Tensor) and F.linear is _linear:
                # (F.linear's one op, recorded here: two calls fewer a layer call; 2: the user's line is above the
                # caller of this method, Module.__call__ or the user's own call)
                return _record(input._s, "linear", [input, w] if b is None else [input, w, b], None, input._dev, 2)
            return F.linear(input, w, b)
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """torch's ``Linear`` subclass for ``MultiheadAttention.out_proj`` (a name torch's quantization tooling skips):
    the same layer, kept so that reprs, ``isinstance`` checks and ``torch.serialization.safe_globals`` lists that
    name it work unchanged."""

class Bilinear(Module):
    """``y = x1^T A x2 + b``."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = _param(out_features, in1_features, in2_features, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_features, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._n
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of zeros, reflect, replicate, circular, got {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = tuple(F._pair(kernel_size, n))
        self.stride = tuple(F._pair(stride, n))
        self.padding = padding if isinstance(padding, str) else tuple(F._pair(padding, n))
        self.dilation = tuple(F._pair(dilation, n))
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = _param(out_channels, in_channels // groups, *self.kernel_size, device=device, dtype=dtype)
        if bias:
            self.bias = _param(out_channels, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _padded(self, x):
        if self.padding_mode == "zeros" or self.padding == "valid":
            return x, self.padding
        pads = []
        if self.padding == "same":  # total d * (k - 1), the odd one at the end, as torch
            for k, d in zip(reversed(self.kernel_size), reversed(self.dilation)):
                t = d * (k - 1)
                pads += [t // 2, t - t // 2]
        else:
            for p in reversed(self.padding):
                pads += [p, p]
        return F.pad(x, pads, mode=self.padding_mode), 0

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding if isinstance(self.padding, str) else self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv2d(_ConvNd):
    """2-D convolution (cross-correlation) over ``[N, C, H, W]``."""

    _n = 2

    def forward(self, input):  # noqa: A002
        x, p = self._padded(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, p, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """1-D convolution over ``[N, C, L]``."""

    _n = 1

    def forward(self, input):  # noqa: A002
        x, p = self._padded(input)
        return F.conv1d(x, self.weight, self.bias, self.stride, p, self.dilation, self.groups)


class Conv3d(_ConvNd):
    """3-D convolution over ``[N, C, D, H, W]`` (or ``[C, D, H, W]``): ``F.conv3d``, a sum of ``conv2d`` over the
    kernel's depth (``nn/pooling_nd.py``)."""

    _n = 3

    def forward(self, input):  # noqa: A002
        x, p = self._padded(input)
        return F.conv3d(x, self.weight, self.bias, self.stride, p, self.dilation, self.groups)


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_Pool):
    def forward(self, input):  # noqa: A002
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class MaxPool1d(_Pool):
    def forward(self, input):  # noqa: A002
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):  # noqa: A002
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(AvgPool2d):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__(_single(kernel_size), _single(stride if stride is not None else kernel_size),
                         _single(padding), ceil_mode, count_include_pad)

    def forward(self, input):  # noqa: A002
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AdaptiveAvgPool2d(_Hyper):
    _fn = "adaptive_avg_pool2d"
    _args = ("output_size",)
    _repr = ("output_size",)

    def __init__(self, output_size):
        super().__init__(output_size=output_size)


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def forward(self, input):  # noqa: A002
        return F.adaptive_avg_pool1d(input, self.output_size)


class _NormBase(Module):
    """What batch and instance normalisation share (torch's ``_NormBase``): ``num_features``, ``eps``, ``momentum``,
    the affine ``weight``/``bias`` (``bias=False`` keeps the weight only) and the running statistics."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=D.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, x) -> None:
        pass

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):  # noqa: A002
        self._check_input_dim(input)
        momentum = self.momentum
        use_batch = self.training or not self.track_running_stats
        count = None
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                rebind(self.num_batches_tracked, self.num_batches_tracked + 1)
            if momentum is None:  # cumulative moving average: 1 / num_batches_tracked (a device scalar)
                count = self.num_batches_tracked
        return F._batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                             self.running_var if not self.training or self.track_running_stats else None,
                             self.weight, self.bias, use_batch, 0.1 if momentum is None else momentum, self.eps,
                             count)


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, x) -> None:
        if x.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {x.ndim}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, x) -> None:
        if x.ndim != 4:
            raise ValueError(f"expected 4D input (got {x.ndim}D input)")


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``[N, C, D, H, W]`` (torch's ``nn.BatchNorm3d``)."""

    def _check_input_dim(self, x) -> None:
        if x.ndim != 5:
            raise ValueError(f"expected 5D input (got {x.ndim}D input)")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):  # noqa: A002
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table: ``weight[input]``; initialised N(0, 1), the ``padding_idx`` row zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError("Padding_idx must be within num_embeddings")
            padding_idx = padding_idx % num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = _param(num_embeddings, embedding_dim, device=device, dtype=dtype)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None, max_norm=None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False) -> Embedding:
        """An Embedding holding ``embeddings`` (``[rows, cols]``), frozen unless ``freeze=False``."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse, _weight=embeddings, _freeze=freeze)

    def forward(self, input):  # noqa: A002
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


class Dropout(_Hyper):
    _repr = ("p", "inplace")

    def __init__(self, p: float = 0.5, inplace: bool = False):
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        super().__init__(p=p, inplace=inplace)

    def forward(self, input):  # noqa: A002
        return F.dropout(input, self.p, self.training, self.inplace)


class _DropoutNd(Dropout):
    """torch's dropout layers besides :class:`Dropout`: ``p`` and ``inplace``; the forward is ``F.<_fn>``."""

    def forward(self, input):  # noqa: A002
        return getattr(F, self._fn)(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs with probability ``p`` in training (``F.dropout1d``)."""

    _fn = "dropout1d"


class Dropout2d(_DropoutNd):
    """Zeroes whole channels of (N, C, H, W) or (C, H, W) inputs with probability ``p`` in training
    (``F.dropout2d``)."""

    _fn = "dropout2d"


class Dropout3d(_DropoutNd):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) inputs with probability ``p`` in training
    (``F.dropout3d``)."""

    _fn = "dropout3d"


class AlphaDropout(_DropoutNd):
    """Dropout for SELU networks: keeps the mean and variance of its input (``F.alpha_dropout``)."""

    _fn = "alpha_dropout"


class FeatureAlphaDropout(_DropoutNd):
    """:class:`AlphaDropout` of whole channels (``F.feature_alpha_dropout``)."""

    _fn = "feature_alpha_dropout"


class Flatten(_Hyper):
    _repr = ("start_dim", "end_dim")

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__(start_dim=start_dim, end_dim=end_dim)

    def forward(self, input):  # noqa: A002
        return input.flatten(self.start_dim, self.end_dim)


class Unflatten(_Hyper):
    _repr = ("dim", "unflattened_size")

    def __init__(self, dim: int, unflattened_size):
        super().__init__(dim=dim, unflattened_size=tuple(unflattened_size))

    def forward(self, input):  # noqa: A002
        return input.unflatten(self.dim, self.unflattened_size)


# ------------------------------------------------------------------------------------------------ activations

class _Act(_Hyper):
    _args = ("inplace",)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace=inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Act):
    _fn = "relu"


class ReLU6(_Act):
    _fn = "relu6"


class SiLU(_Act):
    _fn = "silu"


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):  # noqa: A002
        return F.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, input):  # noqa: A002
        return input.tanh()


class Sigmoid(Module):
    def forward(self, input):  # noqa: A002
        return input.sigmoid()


class Mish(Module):
    def forward(self, input):  # noqa: A002
        return F.mish(input)


class LeakyReLU(_Hyper):
    _fn = "leaky_relu"
    _args = ("negative_slope", "inplace")

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(negative_slope=negative_slope, inplace=inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(_Hyper):
    _fn = "elu"
    _args = ("alpha", "inplace")

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha=alpha, inplace=inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(_Hyper):
    _fn = "softplus"
    _args = ("beta", "threshold")
    _repr = ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(beta=beta, threshold=threshold)


class Hardtanh(_Hyper):
    _fn = "hardtanh"
    _args = ("min_val", "max_val", "inplace")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None):
        """``min_value`` and ``max_value``: torch's deprecated names of ``min_val`` and ``max_val`` (with its
        FutureWarning)."""
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated and renamed to `min_val`", FutureWarning,
                          stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated and renamed to `max_val`", FutureWarning,
                          stacklevel=2)
            max_val = max_value
        super().__init__(min_val=min_val, max_val=max_val, inplace=inplace)
        if max_val <= min_val:
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class Softmax(_Hyper):
    _fn = "softmax"
    _args = ("dim",)
    _repr = ("dim",)

    def __init__(self, dim: int | None = None):
        super().__init__(dim=dim)

    def forward(self, input):  # noqa: A002
        name = self._fn
        fn = getattr(F, name)
        direct = _DIRECT.get(name)
        if direct is not None and fn is direct[0] and isinstance(input, Tensor) \
                and getattr(type(input), name) is direct[1]:
            # (F.<fn>'s and the tensor method's one op, recorded here as Linear's: two calls fewer, and the search for
            # the user's line every recorded op makes starts above this frame, at Module.__call__ or the user's call)
            # (an implicit dim's warning points at the module's caller: _softmax_dim, forward, Module.__call__, there)
            return _record(input._s, name, [input], {"dim": _softmax_dim(input, self.dim, name, 4)}, input._dev, 2)
        # (torch passes ``_stacklevel=5`` always; here only when it matters, for a replaced F.<fn> that lacks it)
        return fn(input, self.dim) if self.dim is not None else fn(input, self.dim, _stacklevel=5)


class LogSoftmax(Softmax):
    _fn = "log_softmax"


class Softmin(Softmax):
    _fn = "softmin"


#: the ops :meth:`Softmax.forward` records itself: by name, (F's function, the tensor method) whose work it does, while
#: neither is replaced (by the program, or by a subclass of Tensor for the method)
_DIRECT = {"softmax": (F.softmax, Tensor.softmax), "log_softmax": (F.log_softmax, Tensor.log_softmax)}


class GLU(_Hyper):
    _fn = "glu"
    _args = ("dim",)
    _repr = ("dim",)

    def __init__(self, dim: int = -1):
        super().__init__(dim=dim)


class LogSigmoid(Module):
    """``log(sigmoid(x))`` (``F.logsigmoid``)."""

    def forward(self, input):  # noqa: A002
        return F.logsigmoid(input)


class Hardswish(_Act):
    """``x * relu6(x + 3) / 6`` (``F.hardswish``); torch's repr shows no ``inplace``."""

    _fn = "hardswish"

    def extra_repr(self) -> str:
        return ""


class Hardsigmoid(Hardswish):
    """``relu6(x + 3) / 6`` (``F.hardsigmoid``)."""

    _fn = "hardsigmoid"


class Hardshrink(_Hyper):
    """``x`` where ``|x| > lambd``, else 0 (``F.hardshrink``)."""

    _fn = "hardshrink"
    _args = ("lambd",)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0 (``F.softshrink``)."""

    _fn = "softshrink"


class Tanhshrink(Module):
    """``x - tanh(x)`` (``F.tanhshrink``)."""

    def forward(self, input):  # noqa: A002
        return F.tanhshrink(input)


class Softsign(Module):
    """``x / (1 + |x|)`` (``F.softsign``)."""

    def forward(self, input):  # noqa: A002
        return F.softsign(input)


class CELU(_Hyper):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (``F.celu``)."""

    _fn = "celu"
    _args = ("alpha", "inplace")

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(alpha=alpha, inplace=inplace)

    extra_repr = ELU.extra_repr


class SELU(_Act):
    """The scaled ELU with torch's constants (``F.selu``)."""

    _fn = "selu"


class Threshold(_Hyper):
    """``x`` where ``x > threshold``, else ``value`` (``F.threshold``)."""

    _fn = "threshold"
    _args = ("threshold", "value", "inplace")

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(threshold=threshold, value=value, inplace=inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with a learned slope per channel (``num_parameters``: 1 or the channels),
    initialised to ``init`` (``F.prelu``)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = _param(num_parameters, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input):  # noqa: A002
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class RReLU(_Hyper):
    """Leaky ReLU whose negative slope is drawn from ``U(lower, upper)`` per element in training (the cluster's
    generator: the draws differ from torch's) and is their mean in eval (``F.rrelu``)."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__(lower=lower, upper=upper, inplace=inplace)

    def forward(self, input):  # noqa: A002
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class Softmax2d(Module):
    """Softmax over the channels of a ``[N, C, H, W]`` or ``[C, H, W]`` input (dim -3)."""

    def forward(self, input):  # noqa: A002
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)
