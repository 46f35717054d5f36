"""OpenCL C 1.2: one ``__kernel`` per kernel, one work item per grid index.

The host rounds the global size up to a multiple of the work-group size, so every kernel starts with
``if (gid >= GRID) return;``. Math is overloaded (``exp`` on float and double), 64-bit integers are ``long``,
16-bit floats are stored as ``ushort`` words and converted by the shared preamble (no ``cl_khr_fp16`` needed).
Vector values are ``floatN``/``intN`` (bools: comparisons of float vectors give -1 or 0 a lane), read and written
with ``vloadN``/``vstoreN`` (element alignment suffices), chosen lane by lane with ``select``.
Double precision needs ``cl_khr_fp64``, which the runtime checks for before it lists a device.

``own_math`` (CPU drivers): float ``sin`` and ``exp`` are the renderer's own vectorising functions, and vector
``cos``/``tan`` the driver's guarded against its large-argument bug (:mod:`.opencl_math`).
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D

from . import ir
from .opencl_math import OWN_MATH, own_math_source
from .render import CStyleRenderer


class OpenCLRenderer(CStyleRenderer):
    target = "opencl"
    storage = {D.bool_: "uchar", D.uint8: "uchar", D.int8: "char", D.int16: "short", D.int32: "int",
               D.int64: "long", D.float16: "ushort", D.bfloat16: "ushort", D.float32: "float", D.float64: "double"}
    index_type = "long"
    int64_suffix = "l"
    float_suffix = False
    GLOBAL_ID = "get_global_id(0)"
    LOCAL_ID = "get_local_id(0)"
    GROUP_ID = "get_group_id(0)"
    BARRIER = "barrier(CLK_LOCAL_MEM_FENCE)"
    GROUP_MEMORY = "__local"
    headers = "#pragma OPENCL FP_CONTRACT OFF\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    macros = r"""#define TW_FN static inline
#define TW_I64 long
#define TW_U64 ulong
#define TW_U64C(x) x##UL
#define TW_AS_UINT(x) as_uint(x)
#define TW_AS_FLOAT(x) as_float(x)
#define TW_AS_U64(x) as_ulong(x)
#define TW_AS_F64(x) as_double(x)
#define TW_SQRT sqrt
#define TW_FLOOR floor
"""

    def __init__(self, own_math: bool = False):
        self.own_math = OWN_MATH if own_math else frozenset()

    def alu(self, x: ir.X, a: list[str]) -> str:
        dt = x.dtype
        if x.arg in self.own_math and (dt is D.float32 or dt in D.HALF):
            name = f"tw_{x.arg}_x{x.width}"
            if name not in self._own:
                src = own_math_source(x.arg, x.width)
                if src is not None:
                    self._own[name] = src
            if name in self._own:
                return self.round(f"{name}({a[0]})", dt)
        return super().alu(x, a)

    def buf_param(self, b: ir.Buf) -> str:
        const = "" if b.out else "const "
        return f"__global {const}{self.storage[b.dtype]}* restrict {b.name}"

    def err_param(self) -> str:
        return "__global long* restrict tw_err"

    def raise_error(self, code: int, detail: str) -> str:
        return f"{{ tw_err[0] = {code}; tw_err[1] = (long){detail}; }}"

    def vector_type(self, dt: D.DType, width: int) -> str:
        # a float32 comparison gives an int vector (lanes -1 or 0): bool vectors are int vectors
        return f"int{width}" if dt is D.bool_ else f"{self.reg(dt)}{width}"

    def memory_vector_type(self, dt: D.DType, width: int) -> str:
        return f"{self.storage[dt]}{width}"

    def pack(self, vtype: str, lanes: list[str]) -> str:
        return f"(({vtype})({', '.join(lanes)}))"

    def vload(self, buf: str, idx: str, width: int) -> str:
        return f"vload{width}(0, {buf} + {idx})"

    def vstore(self, buf: str, idx: str, v: str, width: int) -> str:
        return f"vstore{width}({v}, 0, {buf} + {idx})"

    def select(self, c: str, a: str, b: str) -> str:
        return f"select({b}, {a}, {c})"

    def broadcast(self, x: ir.X, a: str) -> str:
        t = self.vector_type(x.dtype, x.width)
        return f"(-({t})({a}))" if x.dtype is D.bool_ else f"(({t})({a}))"  # true: 1 as a scalar, -1 in a lane

    def lane(self, a: str, i: int) -> str:
        return f"{a}.s{i:x}"

    def qualifiers(self, k: ir.Kernel) -> str:
        # a work-group kernel declares its size: the driver can then compile for exactly that group
        return f"__kernel __attribute__((reqd_work_group_size({k.local}, 1, 1)))" if k.local else "__kernel"
