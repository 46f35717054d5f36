"""tensorwire: remote tensors with PyTorch's habits.

``import tensorwire as tw``; ``tw.connect()`` (or just use ``tw.randn`` ...: the first call connects,
starting an embedded local cluster when ``TENSORWIRE_ADDRESS`` is not set).
"""

from __future__ import annotations

from tensorwire import hub
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol import dtypes as _D
from tensorwire.protocol.dtypes import DType as dtype
from tensorwire.protocol.dtypes import get_default_dtype, promote_types, set_default_dtype
from tensorwire.protocol.errors import (
    Cancelled,
    CompileError,
    ConnectionFailed,
    DependencyFailed,
    DeviceError,
    DTypeError,
    ExecutionError,
    IndexOutOfRange,
    NotFound,
    OutOfMemory,
    ProtocolError,
    QuotaExceeded,
    ServiceUnavailable,
    ShapeError,
    TensorwireError,
    Unauthorized,
    WorkerLost,
)

from . import accelerator, autograd, cuda, distributed, mps, onnx, profiler, progress
from . import functions as _F
from .autograd_engine import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .cluster import LocalCluster
from .context import connect, current_session, disconnect, set_session, use_session
from .creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    logspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from .functions import (
    cancel,
    cat,
    concat,
    concatenate,
    devices,
    einsum,
    get_default_device,
    hstack,
    is_tensor,
    matmul,
    max,
    memory_stats,
    min,
    set_default_device,
    stack,
    synchronize,
    tensordot,
    vstack,
    where,
)
from .random import Generator, default_generator, initial_seed, manual_seed, seed
from .session import Session
from .tensor import Size, Tensor, device

__version__ = "0.1.0"

bool = _D.bool_  # noqa: A001
uint8 = _D.uint8
int8 = _D.int8
int16 = _D.int16
int32 = _D.int32
int64 = _D.int64
float16 = _D.float16
bfloat16 = _D.bfloat16
float32 = _D.float32
float64 = _D.float64
half = _D.float16
float = _D.float32  # noqa: A001
double = _D.float64
long = _D.int64
int = _D.int32  # noqa: A001
short = _D.int16

#: memory formats, accepted where torch takes ``memory_format=`` (a worker's tensors are always contiguous)
contiguous_format = "contiguous_format"
channels_last = "channels_last"
channels_last_3d = "channels_last_3d"
preserve_format = "preserve_format"

globals().update({k: v for k, v in _F.METHOD_FUNCTIONS.items() if k not in globals()})


def result_type(a, b):
    """The dtype ``a op b`` produces (PyTorch's rules)."""
    ops = [(x.dtype, x.ndim) if isinstance(x, Tensor) else x for x in (a, b)]
    return _D.result_type(*ops)


def is_floating_point(t: Tensor) -> bool:
    return t.dtype.is_floating_point


__all__ = [
    "PROTOCOL_VERSION", "Tensor", "Size", "device", "dtype", "Session", "LocalCluster", "connect", "disconnect",
    "current_session", "set_session", "use_session", "Generator", "default_generator", "manual_seed", "seed",
    "initial_seed", "TensorwireError", "ShapeError", "DTypeError", "DeviceError", "IndexOutOfRange",
    "OutOfMemory", "WorkerLost", "ServiceUnavailable", "Unauthorized", "ProtocolError", "NotFound",
    "DependencyFailed", "ExecutionError", "ConnectionFailed", "get_default_dtype", "set_default_dtype",
    "promote_types", "result_type", "autograd", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "inference_mode", "accelerator", "cuda", "mps", "onnx", "channels_last", "contiguous_format", "preserve_format",
]

# the model-building toolkit (issue 4): imported last, it builds on everything above
# torch.backends.{cuda,mps,cudnn} for programs written for PyTorch: the plugin packages load without their drivers
import tensorwire.backends.cuda  # noqa: E402,F401
import tensorwire.backends.mps  # noqa: E402,F401

from . import amp, models, nn, optim, utils  # noqa: E402
from .amp import autocast  # noqa: E402
from .serialization import load, save  # noqa: E402

__all__ += ["nn", "optim", "utils", "models", "save", "load", "ops"]
__all__ += ["cancel", "Cancelled", "QuotaExceeded"]  # issue 16: cancelling work, per-session memory quotas
from .jit import CompileWarning, compile  # noqa: E402,A004  (issue 19: capture a step once, replay it)
from .legacy_types import (  # noqa: E402  (torch.FloatTensor, ...: older scripts build tensors with them)
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)
from .legacy_types import __all__ as _legacy  # noqa: E402
from .ops import ops  # noqa: E402  (every op by name, plugins' custom ops included: torch.ops)

__all__ += ["compile", "CompileError", "CompileWarning"]
__all__ += _legacy
__all__ += ["profiler", "progress"]  # issue 18: tw.profiler.profile(), hub download progress
