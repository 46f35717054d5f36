"""The clang HIP path's precompiled runtime header (``compiler_hip._clang_pch``): the same code object as without it,
a source's error its own, and a header clang refuses costs that compile the header, not the kernel (~4 s of clang)."""

from __future__ import annotations

import os

import pytest

from tensorwire.backends.codegen import compiler_hip as H

WHY = H.hip_unavailable("clang")
pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))

SOURCE = ('#include <hip/hip_runtime.h>\nextern "C" __global__ void k(const float* a, float* b, long n) {\n'
          '  long i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] = sqrtf(a[i]) * __expf(a[i]);\n}\n')


def test_the_header_gives_the_same_code_object_and_a_refused_one_is_built_again(monkeypatch):
    clang, (rocm, bitcode) = H._clang()
    base = tuple(H._clang_base(clang, rocm, bitcode, "gfx90a", ()))
    monkeypatch.setattr(H, "_PCH", {})
    with_pch = H.compile_hip(SOURCE, "gfx90a", compiler="clang")
    pch = H._PCH[base]
    assert pch and os.path.getsize(pch) > 1 << 20, pch
    with pytest.raises(H.KernelCompileError, match="undeclared identifier 'nosuch'"):
        H.compile_hip(SOURCE.replace("sqrtf(a[i])", "nosuch"), "gfx90a", compiler="clang")
    assert H._PCH[base] == pch  # the source's error: the header kept
    monkeypatch.setattr(H, "_PCH", {base: None})  # (None: clang could not build one)
    plain = H.compile_hip(SOURCE, "gfx90a", compiler="clang")
    assert with_pch == plain and with_pch[:4] == b"\x7fELF"
    monkeypatch.setattr(H, "_PCH", {base: pch})
    os.remove(pch)  # clang refuses a header it cannot read: the kernel compiles without it, the header is dropped
    assert H.compile_hip(SOURCE, "gfx90a", compiler="clang") == plain
    assert base not in H._PCH
