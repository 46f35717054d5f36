"""One home per op (issue 32): an elementwise op's OpDef is the single source of its numpy and MLX kernels, its
conformance reference, its Tensor methods and functions, its autocast policy and its VJP rule."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from tensorwire.autograd.vjp import RULES, has_vjp, vjp
from tensorwire.backends.cpu.kernels import ARRAY_FN, KERNELS, specialize
from tensorwire.backends.testing.elementwise import BINARY_REF, UNARY_REF
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.graph import ExpandingBuilder, Value
from tensorwire.protocol.ops import OPS

ELEMENTWISE = {n: op for n, op in OPS.items() if op.array_fn and op.kind in ("unary", "binary")}
HAS_MLX = importlib.util.find_spec("mlx") is not None


def test_every_op_with_an_array_function_has_its_kernels_reference_and_method():
    from tensorwire.tensor import Tensor

    assert {"atan2", "add", "exp", "eq", "bitwise_and"} <= set(ELEMENTWISE)
    for name, op in ELEMENTWISE.items():
        assert callable(getattr(np, op.array_fn)), name
        assert name in KERNELS, name
        assert (UNARY_REF if op.nin == 1 else BINARY_REF).get(name, False) is not False, name
        assert callable(getattr(Tensor, name, None)) or any(hasattr(Tensor, m) for m in op.methods), name
    assert ARRAY_FN["atan2"] is np.arctan2 and BINARY_REF["atan2"] is np.arctan2


@pytest.mark.skipif(not HAS_MLX, reason="MLX is not installed (the mps extra)")
def test_every_op_with_an_array_function_has_an_mlx_kernel():
    import mlx.core as mx

    from tensorwire.backends.mps.kernels import KERNELS as MLX_KERNELS

    for name, op in ELEMENTWISE.items():
        assert callable(getattr(mx, op.array_fn)), name
        assert name in MLX_KERNELS, name


def test_integer_only_ops_have_every_home():
    """torch's integer-only binary ops. The shifts' array functions are numpy's and MLX's (MLX's kernel is written by
    hand: it masks the count); gcd and lcm have none (numpy's differ from torch's at the dtype's minimum and where lcm
    overflows, and MLX has neither), so their kernels and references are written by hand. Each gets every home."""
    import tensorwire as tw
    from tensorwire.backends.codegen.elementwise import RULES as LOWERING
    from tensorwire.tensor import Tensor

    for name in ("bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm"):
        op = OPS[name]
        assert op.kind == "binary" and op.nin == 2 and not op.differentiable and op.methods == (name,), name
        assert name in KERNELS and name in LOWERING and BINARY_REF.get(name, False) is None, name
        assert callable(getattr(Tensor, name)) and callable(getattr(tw, name)), name
        assert op.array_fn == (name if "shift" in name else None), name
    if HAS_MLX:
        from tensorwire.backends.mps.kernels import KERNELS as MLX_KERNELS

        assert {"bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm"} <= set(MLX_KERNELS)


def test_methods_functions_and_autocast_come_from_the_table():
    import tensorwire as tw
    from tensorwire.amp.policy import POLICIES
    from tensorwire.functions import METHOD_FUNCTIONS
    from tensorwire.tensor import Tensor

    for op in OPS.values():
        for m in op.methods:
            assert getattr(Tensor, m) is getattr(Tensor, op.methods[0]), m  # aliases are the same method
            assert m in METHOD_FUNCTIONS, m
        if op.autocast:
            assert POLICIES["cuda"][op.name] == op.autocast
    assert Tensor.arctan2 is Tensor.atan2 and tw.arctan2 is METHOD_FUNCTIONS["arctan2"]
    assert POLICIES["cuda"]["atan2"] == "promote" and "atan2" not in POLICIES["cpu"]


def test_the_straight_line_runner_calls_the_table_s_ufuncs():
    class Step:
        op, in_meta, dtype, shape, attrs = "atan2", (((3,), D.float32), ((3,), D.float32)), D.float32, (3,), {}

    assert specialize(Step()) is np.arctan2


def test_every_elementwise_primitive_has_one_vjp_home():
    """A differentiable elementwise primitive's rule lives in exactly one place: declared with its op, or (sign, the
    rounding ops and floor_divide, which share a zero rule) in autograd/vjp.py's table, never both."""
    from tensorwire.protocol.ops import FLOAT_UNARY, SAME_UNARY

    for name in (*FLOAT_UNARY, *SAME_UNARY, "add", "sub", "mul", "div", "maximum", "minimum", "remainder", "pow",
                 "atan2", "floor_divide"):
        assert (OPS[name].vjp is not None) != (name in RULES), name
        assert has_vjp(name), name


def test_a_vjp_rule_declared_with_its_op_is_used():
    assert OPS["atan2"].vjp is not None and "atan2" not in RULES and has_vjp("atan2")
    b = ExpandingBuilder()
    x, y = Value((2, 3), D.float32, -1), Value((3,), D.float32, -2)
    out = b.op("atan2", x, y)
    start = len(b.nodes)
    gx, gy = vjp(b, "atan2", [x, y], out, b.op("full", shape=[2, 3], dtype="float32", value=1.0), {}, [True, True])
    assert gx.shape == (2, 3) and gy.shape == (3,)  # the broadcast gradient summed back
    ops = [n[0] for n in b.nodes[start:]]
    assert "div" in ops and "sum" in ops, ops


_NEW_OP = """
import json
import numpy as np
from tensorwire.protocol.ops import OPS, OpDef, register_op
from tensorwire.protocol.ops.elementwise import _binary_float

def _lae_vjp(c):
    a, b = c.x
    return [c.g * (a - c.y).op("exp"), c.g * (b - c.y).op("exp")]

register_op(OpDef("zz_lae", 2, _binary_float, kind="binary", array_fn="logaddexp", methods=("zz_lae", "zz_lae2"),
                  autocast="promote", vjp=_lae_vjp))
from tensorwire.amp.policy import POLICIES
from tensorwire.autograd.vjp import has_vjp
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.backends.testing.elementwise import BINARY_REF
from tensorwire.functions import METHOD_FUNCTIONS
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor
a, b = np.array([0.0, 2.0], np.float32), np.array([0.0, -1.0], np.float32)
out = {"cpu": KERNELS["zz_lae"]([a, b], {}, (2,), D.float32).round(5).tolist(),
       "ref": BINARY_REF["zz_lae"](a, b).round(5).tolist(),
       "methods": [hasattr(Tensor, "zz_lae"), Tensor.zz_lae2 is Tensor.zz_lae, "zz_lae2" in METHOD_FUNCTIONS],
       "amp": POLICIES["cuda"].get("zz_lae"), "vjp": has_vjp("zz_lae")}
try:
    import mlx.core as mx
    from tensorwire.backends.mps.kernels import KERNELS as MLX
    out["mlx"] = np.asarray(MLX["zz_lae"]([mx.array(a), mx.array(b)], {}, (2,), D.float32)).round(5).tolist()
except ImportError:  # (no MLX: the other checks still hold)
    out["mlx"] = out["ref"]
print(json.dumps(out))
"""


def test_a_new_binary_op_needs_only_its_opdef():
    """An op registered with an array function, methods, an autocast policy and a VJP rule, before the rest loads,
    gets its numpy and MLX kernels, its reference, its Tensor methods and functions, its policy and its gradient."""
    r = subprocess.run([sys.executable, "-c", _NEW_OP], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = np.logaddexp(np.float32([0.0, 2.0]), np.float32([0.0, -1.0])).round(5).tolist()  # [log 2, 2.04858]
    assert got == {"cpu": want, "ref": want, "mlx": want, "methods": [True, True, True], "amp": "promote",
                   "vjp": True}
