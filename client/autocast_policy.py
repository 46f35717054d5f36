"""Which recorded ops autocast runs in which dtype, per device type: torch's autocast op lists
(``aten/src/ATen/autocast_mode.cpp``) as data, in the names of the ops tensorwire records.

- ``lower``: cast floating inputs to the autocast dtype (float16 / bfloat16).
- ``fp32``: cast floating inputs to float32.
- ``fp32_opt_dtype``: float32 unless the call names a ``dtype`` (``sum(dtype=...)``); only the first input.
- ``promote``: cast floating inputs to the widest floating dtype among them.

float64 inputs are never cast, and inputs on other device types are left alone, as torch's ``is_eligible``.
Composite functions that record several ops (``mse_loss`` as sub/mul/mean, ``einsum`` as matmuls) follow from
their ops, which gives torch's output dtypes for the common cases.

Outside the ``amp`` package (whose ``__init__`` loads ``GradScaler``, which imports the autograd engine): recording
reads it through :mod:`tensorwire.autocast_state`; ``tensorwire.amp.policy`` gives the same names.
"""

from __future__ import annotations

from tensorwire.protocol.ops import OPS

# torch's CUDA list (MPS uses the same one): matmuls and convolutions low, numerically sensitive ops in float32; the
# elementwise ops declare theirs in the op table (OpDef.autocast: exp, pow ...), the other families' are here
_GPU = {
    **{name: op.autocast for name, op in OPS.items() if op.autocast},
    **dict.fromkeys(("matmul", "linear", "conv2d"), "lower"),
    **dict.fromkeys(
        (
            "log10",
            "log2",
            "rsqrt",
            "erfinv",
            "softplus",
            "layer_norm",
            "logsumexp",
            "norm",
            "cross_entropy_index",
        ),
        "fp32",
    ),
    **dict.fromkeys(("prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum"), "fp32_opt_dtype"),
    **dict.fromkeys(("cat", "index_put", "scatter_add"), "promote"),
}

# torch's CPU list: the same low-precision ops; only a few losses and reductions in float32
_CPU = {
    **dict.fromkeys(("matmul", "linear", "conv2d"), "lower"),
    **dict.fromkeys(("prod", "cross_entropy_index"), "fp32"),
    **dict.fromkeys(("cat",), "promote"),
}

POLICIES: dict[str, dict[str, str]] = {"cpu": _CPU, "cuda": _GPU, "rocm": _GPU, "mps": _GPU, "opencl": _GPU}

# torch's default autocast dtype per device type
DEFAULT_DTYPES: dict[str, str] = {
    "cpu": "bfloat16",
    "cuda": "float16",
    "rocm": "float16",
    "mps": "float16",
    "opencl": "float16",
}

SUPPORTED_DTYPES = ("float16", "bfloat16")
