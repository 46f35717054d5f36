"""tensorwire: remote tensors with PyTorch's habits.

``import tensorwire as tw``; ``tw.connect()`` (or just use ``tw.randn`` ...: the first call connects,
starting an embedded local cluster when ``TENSORWIRE_ADDRESS`` is not set).

Every public name is loaded on first use (PEP 562): ``import tensorwire`` itself imports nothing heavy, so the
services (``tensorwire.dispatcher``, ``.backends``, ``.autograd``, ``.hub``: submodules of this package) do not
pay for the client, and a program pays only for what it touches (``tw.nn`` loads the layers, ``tw.hub`` the hub
client). ``dir(tw)``, ``from tensorwire import X`` and ``from tensorwire import *`` see every name as before.
"""

from __future__ import annotations

import builtins as _builtins
import importlib as _importlib
import sys as _sys
import types as _types
from importlib import util as _import_util

__version__ = "0.1.0"

#: memory formats, accepted where torch takes ``memory_format=`` (a worker's tensors are always contiguous)
contiguous_format = "contiguous_format"
channels_last = "channels_last"
channels_last_3d = "channels_last_3d"
preserve_format = "preserve_format"


def _names(module: str, *names: str) -> dict[str, tuple[str, str | None]]:
    return {n: (module, n) for n in names}


def _submodules(*names: str) -> dict[str, tuple[str, str | None]]:
    return {n: (f"tensorwire.{n}", None) for n in names}


_P = "tensorwire.protocol"
#: public name -> (module, attribute in it; None: the module itself), imported on first access
_LAZY: dict[str, tuple[str, str | None]] = {
    "PROTOCOL_VERSION": (_P, "PROTOCOL_VERSION"),
    "dtype": (f"{_P}.dtypes", "DType"),
    **_names(f"{_P}.dtypes", "get_default_dtype", "promote_types", "set_default_dtype"),
    # torch's dtype names, and their aliases
    **_names(f"{_P}.dtypes", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
             "float64", "complex64", "complex128"),
    **{alias: (f"{_P}.dtypes", name) for alias, name in (
        ("bool", "bool_"), ("half", "float16"), ("float", "float32"), ("double", "float64"), ("long", "int64"),
        ("int", "int32"), ("short", "int16"), ("cfloat", "complex64"), ("cdouble", "complex128"))},
    **_names(f"{_P}.errors", "Cancelled", "CompileError", "ConnectionFailed", "DependencyFailed", "DeviceError",
             "DTypeError", "ExecutionError", "IndexOutOfRange", "NotFound", "OutOfMemory", "ProtocolError",
             "QuotaExceeded", "ServiceUnavailable", "ShapeError", "TensorwireError", "Unauthorized", "WorkerLost"),
    # torch-like namespaces (``backends``: torch.backends' flags, see _EXTRA), and the client's own modules
    **_submodules("accelerator", "amp", "autograd", "backends", "cuda", "distributed", "hub", "jit", "models", "mps",
                  "nn", "onnx", "optim", "profiler", "progress", "random", "utils"),
    **_submodules("fft", "linalg", "masked", "signal", "special"),  # issue 33: torch.fft, .linalg, .masked, ...
    **_submodules("distributions"),  # torch.distributions (client/distributions/)
    **_submodules("cpu"),  # torch.cpu: its device functions, and torch.cpu.amp (deprecated spellings of torch.amp's)
    **_submodules("functional", "return_types"),  # torch.functional (torch.einsum ... by that module's name), and
    # torch.return_types (the named tuples of x.max(0), x.sort() ...)
    # issue 33: sparse tensors (torch.sparse, torch.sparse_coo_tensor ...) and layouts
    **_submodules("sparse"),
    **_submodules("func"),  # torch.func: functional_call (client/func.py)
    **_names("tensorwire.sparse", "sparse_coo_tensor", "sparse_csr_tensor", "spmm"),
    **_names("tensorwire.sparse_layout", "layout", "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
             "sparse_bsc"),
    **_submodules("autograd_engine", "autograd_hooks", "channels", "cluster", "combine", "context", "creation",
                  "functions", "known_values", "leases", "legacy_types", "protocol", "serialization", "session",
                  "views"),
    **_names("tensorwire.autograd_engine", "enable_grad", "inference_mode", "is_grad_enabled",
             "is_inference_mode_enabled", "no_grad", "set_grad_enabled"),
    "LocalCluster": ("tensorwire.cluster", "LocalCluster"),
    **_names("tensorwire.context", "connect", "current_session", "disconnect", "set_session", "use_session"),
    **_names("tensorwire.creation", "arange", "as_tensor", "empty", "empty_like", "eye", "from_numpy", "full",
             "full_like", "linspace", "logspace", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like",
             "randn", "randn_like", "randperm", "tensor", "zeros", "zeros_like"),
    **_names("tensorwire.functions", "cancel", "cat", "concat", "concatenate", "devices", "einsum",
             "get_default_device", "hstack", "is_tensor", "matmul", "max", "memory_stats", "min", "result_type",
             "typename",
             "set_default_device", "stack", "synchronize", "tensordot", "vstack", "where"),
    **_names("tensorwire.random", "Generator", "default_generator", "initial_seed", "manual_seed", "seed"),
    "Session": ("tensorwire.session", "Session"),
    **_names("tensorwire.tensor", "Size", "Tensor", "device"),
    "autocast": ("tensorwire.amp", "autocast"),
    # torch's autocast switches at the top level (torch.is_autocast_enabled("cpu"), torch.set_autocast_dtype ...)
    **_names("tensorwire.amp.autocast_mode", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
             "set_autocast_dtype", "is_autocast_cpu_enabled", "get_autocast_cpu_dtype", "set_autocast_cpu_enabled",
             "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_gpu_dtype", "is_autocast_cache_enabled",
             "set_autocast_cache_enabled", "clear_autocast_cache"),
    **_names("tensorwire.serialization", "load", "save"),
    **_names("tensorwire.jit", "CompileWarning", "compile"),
    **_names("tensorwire.legacy_types", "BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor",
             "FloatTensor", "HalfTensor", "IntTensor", "LongTensor", "ShortTensor"),
    "ops": ("tensorwire.ops", "ops"),  # every op by name, plugins' custom ops included: torch.ops
    # torch's process-wide settings (what each does here: client/torch_settings.py) and dtype limits
    **_names("tensorwire.dtype_info", "finfo", "iinfo"),
    **_names("tensorwire.torch_settings", "set_num_threads", "get_num_threads", "set_num_interop_threads",
             "get_num_interop_threads", "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
             "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
             "get_deterministic_debug_mode", "set_float32_matmul_precision", "get_float32_matmul_precision"),
    "set_printoptions": ("tensorwire.printing", "set_printoptions"),
    **_names("tensorwire.random", "get_rng_state", "set_rng_state"),
    # torch-namespace functions: creation, windows, and nn.functional's ops as torch.X (F.X itself where torch.X
    # takes F.X's arguments; an adapter in client/torch_namespace.py where ATen's signature differs)
    **_names("tensorwire.creation_extras", "asarray", "frombuffer", "range", "vander"),
    "can_cast": ("tensorwire.dtype_info", "can_cast"),
    **_names("tensorwire.windows", "bartlett_window", "blackman_window", "hamming_window", "hann_window",
             "kaiser_window"),
    **_names("tensorwire.nn.functional", "adaptive_avg_pool1d", "bilinear", "celu", "conv1d", "conv2d", "conv3d",
             "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_similarity", "hardshrink",
             "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle", "prelu", "rms_norm", "selu",
             "threshold"),
    # torch.testing (assert_close, make_tensor); autograd's anomaly mode switches, as torch.X too
    **_submodules("testing"),
    **_names("tensorwire.anomaly_mode", "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "set_anomaly_enabled"),
    **_names("tensorwire.torch_namespace", "adaptive_max_pool1d", "alpha_dropout", "avg_pool1d", "batch_norm",
             "binary_cross_entropy_with_logits", "cosine_embedding_loss", "dropout", "embedding",
             "feature_alpha_dropout", "group_norm", "hinge_embedding_loss", "instance_norm", "kl_div", "layer_norm",
             "margin_ranking_loss", "max_pool1d", "max_pool2d", "max_pool3d", "poisson_nll_loss", "row_stack",
             "chain_matmul",
             "rrelu", "triplet_margin_loss"),
    # torch._foreach_<op>: an op on each tensor of a list (client/foreach.py makes them from its table); <op>_: in place
    **_names("tensorwire.foreach", *(f"_foreach_{op}" for op in (
        "abs abs_ acos acos_ add add_ addcdiv addcdiv_ addcmul addcmul_ asin asin_ atan atan_ ceil ceil_ clamp_max "
        "clamp_max_ clamp_min clamp_min_ clone copy_ cos cos_ cosh cosh_ div div_ erf erf_ erfc erfc_ exp exp_ expm1 "
        "expm1_ floor floor_ frac frac_ lerp lerp_ lgamma lgamma_ log log10 log10_ log1p log1p_ log2 log2_ log_ max "
        "maximum maximum_ minimum minimum_ mm mul mul_ neg neg_ norm pow pow_ powsum reciprocal reciprocal_ round "
        "round_ rsqrt rsqrt_ sigmoid sigmoid_ sign sign_ sin sin_ sinh sinh_ sqrt sqrt_ sub sub_ tan tan_ tanh tanh_ "
        "trunc trunc_ zero_").split())),
}
#: modules a name needs besides its own: torch.backends.{cuda,mps} are the plugin packages, which load without
#: their drivers and carry torch's flags
#: (a namespace needs no "tensor first" here: whichever module is imported first, Tensor has all its methods once
#: ``tensorwire.tensor`` has loaded, client/_install.py; tests/client/test_import_first.py)
#: (``autograd``: torch.autograd.profiler, which loads the session: not with ``import tensorwire.autograd`` alone, as
#: the autograd service imports that package)
_EXTRA: dict[str, tuple[str, ...]] = {"backends": ("tensorwire.backends.cuda", "tensorwire.backends.mps"),
                                      "autograd": ("tensorwire.autograd.profiler",)}
#: public names that a submodule of the same name would hide once imported (``tw.tensor`` is the function, the
#: module is ``tensorwire.tensor``), and those that must not be bound before their _EXTRA modules are loaded
_GUARDED = frozenset({n for n, (_, attr) in _LAZY.items() if attr is not None} | set(_EXTRA))
_resolved: set[str] = set()


def _load(module: str) -> _types.ModuleType:
    """Import ``module`` at the first use of a public name that needs it: the module behind the name (:data:`_LAZY`),
    those it needs loaded first (:data:`_EXTRA`), or ``tensorwire.functions`` for the method functions."""
    # lazy: the module behind a public name (_LAZY, _EXTRA), at its first use (PEP 562): import tensorwire is light
    return _importlib.import_module(module)


def _method_functions() -> dict:
    """``tw.abs(x)`` and the rest of the Tensor methods as functions (names the table above does not bind): the
    client core, loaded at the first such name only."""
    return getattr(_load("tensorwire.functions"), "METHOD_FUNCTIONS", {})


def __getattr__(name: str):
    """Import the module behind a public name on first access and bind the name (PEP 562)."""
    spec = _LAZY.get(name)
    if spec is None:
        # ``from . import views`` probes the package first: a submodule not imported yet is no attribute (the
        # import system then imports it), and probing for it must not import the client
        if not name.startswith("_") and _import_util.find_spec(f"{__name__}.{name}") is None:
            value = _method_functions().get(name)
            if value is not None:
                globals()[name] = value
                return value
        raise AttributeError(f"module 'tensorwire' has no attribute {name!r}")
    module, attr = spec
    for extra in _EXTRA.get(name, ()):
        _load(extra)
    value = _load(module)
    if attr is not None:
        value = getattr(value, attr)
    _resolved.add(name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_method_functions()))


class _Package(_types.ModuleType):
    """The package's module type: importing a submodule must not rebind a public name of the same name."""

    def __setattr__(self, name: str, value) -> None:
        # the import system binds each imported submodule on its parent: ``tensorwire.tensor`` (the module) would
        # replace ``tw.tensor`` (the function), and ``tensorwire.backends`` would skip torch's flags modules
        if name in _GUARDED and name not in _resolved and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


#: torch's constants (``torch.inf``, ``torch.nan``, ``torch.pi``, ``torch.e``; ``torch.newaxis`` is None, as numpy's):
#: ``x.masked_fill(mask, -torch.inf)`` in every attention layer written since torch 1.x added them
inf = float("inf")
nan = float("nan")
pi = 3.141592653589793
e = 2.718281828459045
newaxis = None


def is_floating_point(t) -> _builtins.bool:
    """Whether ``t``'s dtype is a floating-point one (torch.is_floating_point)."""
    return t.dtype.is_floating_point


def is_complex(t) -> _builtins.bool:
    """Whether ``t``'s dtype is a complex one (torch.is_complex)."""
    return t.dtype.is_complex


__all__ = [
    "PROTOCOL_VERSION", "Tensor", "Size", "device", "dtype", "Session", "LocalCluster", "connect", "disconnect",
    "current_session", "set_session", "use_session", "Generator", "default_generator", "manual_seed", "seed",
    "initial_seed", "TensorwireError", "ShapeError", "DTypeError", "DeviceError", "IndexOutOfRange",
    "OutOfMemory", "WorkerLost", "ServiceUnavailable", "Unauthorized", "ProtocolError", "NotFound",
    "DependencyFailed", "ExecutionError", "ConnectionFailed", "get_default_dtype", "set_default_dtype",
    "promote_types", "result_type", "autograd", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "inference_mode", "accelerator", "cuda", "mps", "onnx", "channels_last", "contiguous_format", "preserve_format",
]
__all__ += ["nn", "optim", "utils", "models", "save", "load", "ops"]
__all__ += ["cancel", "Cancelled", "QuotaExceeded"]  # issue 16: cancelling work, per-session memory quotas
__all__ += ["compile", "CompileError", "CompileWarning"]  # issue 19: capture a step once, replay it
__all__ += ["BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor", "HalfTensor",
            "IntTensor", "LongTensor", "ShortTensor"]  # torch.FloatTensor, ...: older scripts build tensors with them
__all__ += ["profiler", "progress"]  # issue 18: tw.profiler.profile(), hub download progress
__all__ += ["finfo", "iinfo", "set_num_threads", "get_num_threads", "set_num_interop_threads",
            "get_num_interop_threads", "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
            "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
            "get_deterministic_debug_mode", "set_float32_matmul_precision", "get_float32_matmul_precision",
            "set_printoptions", "get_rng_state", "set_rng_state"]  # torch's process-wide settings
__all__ += ["cpu", "is_inference_mode_enabled", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
            "set_autocast_dtype", "is_autocast_cpu_enabled", "get_autocast_cpu_dtype", "set_autocast_cpu_enabled",
            "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_gpu_dtype", "is_autocast_cache_enabled",
            "set_autocast_cache_enabled", "clear_autocast_cache"]  # torch.cpu, grad and autocast mode queries
__all__ += ["inf", "nan", "pi", "e", "newaxis"]  # torch's constants
