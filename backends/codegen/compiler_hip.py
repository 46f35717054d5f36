"""The HIP compilers: HIP source (:class:`~.hip.HIPRenderer`'s) to a code object (an AMDGPU ELF) for one ``gfx``
architecture.

:func:`compile_hip` compiles with hipRTC (``libhiprtc``, or ``libamdhip64`` before ROCm 6, loaded through ctypes), or,
without it, with ``clang++ -x hip --cuda-device-only``. hipRTC declares the HIP device API itself; clang needs
``#include <hip/hip_runtime.h>`` (the renderer's ``headers`` for it, :meth:`~.hip.HIPRenderer.for_compiler`). Both
compile with ``-ffp-contract=off`` (HIP's default contracts ``a * b + c`` into FMAs), so results match the C and
OpenCL targets. No GPU is needed to compile. :func:`hip_unavailable` says why no HIP compiler was found.

clang parses ``hip/hip_runtime.h`` (~60,000 lines) for every source: ~0.9 s of a small module's ~1.1 s. A process
parses it once, into a precompiled header for each (architecture, options) it compiles for (:func:`_clang_pch`, in a
folder of the process's own, removed at exit, or by the next process to build one if this one was killed), and each
compile then includes that: the code object is the same, byte for byte, and a small module takes ~0.25 s. Should the
header fail to build, or clang refuse it (a header changed since), the source is compiled as it is.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import glob
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import threading

from .cache import KernelCompileError
from .compiler import run_compiler
from .hip import HIP_RUNTIME_INCLUDE

DEFAULT_ARCH = "gfx90a"
#: options every compile gets (no FMA contraction)
HIP_OPTIONS = ("-O3", "-ffp-contract=off")
#: (ROCm root, its device bitcode folder): Debian/Ubuntu's packages, then AMD's own install
_ROCM_DIRS = (("/usr", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"), ("/opt/rocm", "/opt/rocm/amdgcn/bitcode"),
              ("/opt/rocm", "/opt/rocm/lib/amdgcn/bitcode"))

_LIB = None
_LIB_WHY = ""
_LOCK = threading.Lock()


def _rocm_roots() -> list[str]:
    """Where ROCm may be installed: ``$ROCM_PATH``, ``/opt/rocm``, then versioned installs, newest first."""
    return [r for r in (os.environ.get("ROCM_PATH"), "/opt/rocm") if r] + sorted(glob.glob("/opt/rocm-*"),
                                                                                 reverse=True)


def _hiprtc_lib():
    """The library that holds hipRTC, or None (see ``_LIB_WHY``): ``libhiprtc`` (its own library since ROCm 6, the
    only home since ROCm 7, which hip-python 7.2 loads too), then ``libamdhip64`` (where ROCm 5 kept it)."""
    global _LIB, _LIB_WHY
    with _LOCK:
        if _LIB is None and not _LIB_WHY:
            roots = _rocm_roots()
            names = [ctypes.util.find_library("hiprtc"), "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so",
                     *(os.path.join(r, "lib", "libhiprtc.so") for r in roots),
                     ctypes.util.find_library("amdhip64"), "libamdhip64.so.5", "libamdhip64.so",
                     *(os.path.join(r, "lib", "libamdhip64.so") for r in roots)]
            errors = []
            for name in filter(None, dict.fromkeys(names)):
                try:
                    lib = ctypes.CDLL(name)
                    lib.hiprtcCreateProgram  # noqa: B018 - the symbol must exist
                except (OSError, AttributeError) as e:
                    errors.append(f"{name}: {e}")
                    continue
                lib.hiprtcGetErrorString.restype = ctypes.c_char_p
                lib.hiprtcGetErrorString.argtypes = [ctypes.c_int]
                _LIB = lib
                break
            else:
                _LIB_WHY = "hipRTC not found (libhiprtc, libamdhip64): " + ("; ".join(errors) or "no library")
        return _LIB


def _clang() -> tuple[str | None, tuple | str]:
    """``(clang++ path, (ROCm root, bitcode dir))`` of a clang that compiles HIP for AMD GPUs, or ``(None, why)``:
    ``HIP_CLANG``, else ROCm's own clang (it matches ROCm's device libraries), else a distribution's."""
    rocm = [os.path.join(r, "llvm", "bin", "clang++") for r in _rocm_roots()]
    for name in (os.environ.get("HIP_CLANG"), *rocm, "clang++-18", "clang++-17", "clang++-16", "clang++-15",
                 "clang++"):
        path = name and shutil.which(name)
        if path:
            break
    else:
        return None, "no clang++ found"
    for root, bitcode in _ROCM_DIRS:
        if os.path.isfile(os.path.join(root, "include", "hip", "hip_runtime.h")) and os.path.isfile(
                os.path.join(bitcode, "ocml.bc")):
            return path, (root, bitcode)
    return None, ("no ROCm install with the HIP headers and device libraries (hip/hip_runtime.h, amdgcn/bitcode/"
                  "ocml.bc): apt-get install libamdhip64-dev rocm-device-libs")


def hip_compiler() -> tuple[str | None, str]:
    """``("hiprtc", library)``, ``("clang", clang++ path)``, or ``(None, why neither is available)``."""
    if _hiprtc_lib() is not None:
        return "hiprtc", _LIB._name
    path, why = _clang()
    if path is not None:
        return "clang", path
    return None, f"{_LIB_WHY}; clang: {why}"


def hip_unavailable(compiler: str | None = None) -> str | None:
    """None when HIP sources can be compiled here (with ``compiler``, "hiprtc" or "clang", when given), else why
    not."""
    if compiler == "hiprtc":
        return None if _hiprtc_lib() is not None else _LIB_WHY
    if compiler == "clang":
        path, why = _clang()
        return None if path else f"clang cannot compile HIP: {why}"
    which, why = hip_compiler()
    return None if which else f"no HIP compiler: {why}"


def hiprtc_version() -> tuple[int, int] | None:
    lib = _hiprtc_lib()
    if lib is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    if lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor)):
        return None
    return major.value, minor.value


def compiler_id(compiler: str) -> str:
    """What identifies ``compiler``'s output for a kernel cache key: hipRTC's version, or clang's path and version
    line."""
    if compiler == "hiprtc":
        major, minor = hiprtc_version() or (0, 0)
        return f"hiprtc {major}.{minor}"
    path, _ = _clang()
    if path is None:
        return "clang"
    try:
        line = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        line = ""
    return f"clang {path} {line}".strip()


def compile_hip(source: str, arch: str = DEFAULT_ARCH, compiler: str | None = None, options=(),
                name: str = "tensorwire.hip") -> bytes:
    """HIP source -> an AMDGPU code object (ELF bytes) for ``arch``, with hipRTC or clang (``compiler``:
    "hiprtc", "clang", or None for the first available). Raises :class:`~.cache.KernelCompileError` with the
    compiler's log when the source does not compile, or when no compiler is available."""
    which = compiler or hip_compiler()[0]
    if which == "hiprtc":
        return _compile_hiprtc(source, arch, options, name)
    if which == "clang":
        return _compile_clang(source, arch, options, name)
    if which is None:
        raise KernelCompileError(hip_unavailable() or "no HIP compiler")
    raise ValueError(f"unknown HIP compiler {which!r} (hiprtc or clang)")


def _compile_hiprtc(source: str, arch: str, options, name: str) -> bytes:
    lib = _hiprtc_lib()
    if lib is None:
        raise KernelCompileError(_LIB_WHY)
    prog = ctypes.c_void_p()
    r = lib.hiprtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if r:
        raise KernelCompileError(f"hiprtcCreateProgram failed: {lib.hiprtcGetErrorString(r).decode()}")
    try:
        opts = [f"--offload-arch={arch}".encode(), *(o.encode() for o in (*HIP_OPTIONS, *options))]
        r = lib.hiprtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if r:
            n = ctypes.c_size_t()
            lib.hiprtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value + 1)
            lib.hiprtcGetProgramLog(prog, log)
            text = log.value.decode(errors="replace").strip()
            raise KernelCompileError(f"hipRTC could not compile {name} for {arch} "
                                     f"({lib.hiprtcGetErrorString(r).decode()}):\n{text[-4000:]}")
        n = ctypes.c_size_t()
        lib.hiprtcGetCodeSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        lib.hiprtcGetCode(prog, buf)
        return buf.raw
    finally:
        lib.hiprtcDestroyProgram(ctypes.byref(prog))


def _clang_base(clang: str, rocm: str, bitcode: str, arch: str, options) -> list[str]:
    """clang's command for device code of ``arch`` up to the input: what a precompiled header and the sources that
    include it must agree on."""
    return [clang, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "--no-gpu-bundle-output",
            f"--rocm-path={rocm}", f"--hip-device-lib-path={bitcode}", *HIP_OPTIONS, *options]


#: (clang command up to the input) -> this process's precompiled HIP runtime header for it, or None (it failed)
_PCH: dict[tuple, str | None] = {}
_PCH_LOCK = threading.Lock()
_PCH_DIR: list[str] = []  # this process's folder of them (made at the first, removed at exit)
_PCH_NUMBER = itertools.count(1)  # each header built is a file of its own: runtime<n>.h / .pch
#: clang's complaints about a precompiled header itself (a header changed since, a mismatched option, a lost file)
_PCH_FAULT = re.compile(r"PCH file|precompiled (header|file)|module file", re.IGNORECASE)


def _remove_pch_dir(folder: str, pid: int) -> None:
    """At exit: this process's headers go (not by a forked child, which inherits the exit handler)."""
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep_pch_dirs(tmp: str) -> None:
    """Remove the header folders (~9 MB each) of processes that are gone without running their exit handlers (a
    worker killed with SIGKILL): a folder is named after its process, ``tw-hip-pch-<pid>-*``, and only our own
    user's folders are touched."""
    for folder in glob.glob(os.path.join(tmp, "tw-hip-pch-*-*")):
        try:
            pid = int(os.path.basename(folder).split("-")[3])
            if os.stat(folder).st_uid != os.getuid() or pid == os.getpid():
                continue
            os.kill(pid, 0)  # alive (or another user's): keep it
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, IndexError, OSError):
            continue


def _clang_pch(base: list[str]) -> str | None:
    """This process's precompiled ``hip/hip_runtime.h`` for compiles with ``base`` (clang, its architecture and
    options), built at the first ask (~1.5 s), or None when clang cannot build one."""
    key = tuple(base)
    with _PCH_LOCK:  # (a prebuild's threads wait for the one building it)
        if key in _PCH:
            return _PCH[key]
        if not _PCH_DIR:
            _sweep_pch_dirs(tempfile.gettempdir())
            _PCH_DIR.append(tempfile.mkdtemp(prefix=f"tw-hip-pch-{os.getpid()}-"))
            atexit.register(_remove_pch_dir, _PCH_DIR[0], os.getpid())
        d = _PCH_DIR[0]
        n = next(_PCH_NUMBER)
        header, pch = os.path.join(d, f"runtime{n}.h"), os.path.join(d, f"runtime{n}.pch")
        with open(header, "w") as f:
            f.write(HIP_RUNTIME_INCLUDE)
        try:
            run_compiler([*base, "-S", "-emit-llvm", "-Xclang", "-emit-pch", header, "-o", pch],
                         f"{os.path.basename(base[0])} precompiling the HIP runtime header", remove=pch)
        except KernelCompileError:
            pch = None
        _PCH[key] = pch
        return pch


def _compile_clang(source: str, arch: str, options, name: str) -> bytes:
    clang, where = _clang()
    if clang is None:
        raise KernelCompileError(f"clang cannot compile HIP: {where}")
    rocm, bitcode = where
    if "hip/hip_runtime.h" not in source:  # a source rendered for hipRTC
        source = HIP_RUNTIME_INCLUDE + source
    base = _clang_base(clang, rocm, bitcode, arch, options)
    pch = _clang_pch(base)
    with tempfile.TemporaryDirectory(prefix="tw-hip-") as d:
        src, out = os.path.join(d, name), os.path.join(d, "out.co")
        with open(src, "w") as f:
            f.write(source)
        what = f"{os.path.basename(clang)} compiling {name} for {arch}"
        key = hashlib.sha256(f"{arch} {options} {source}".encode()).hexdigest()
        # bounded in time and memory, killed with this process (which removes the folder then)
        try:
            run_compiler([*base, *(("-include-pch", pch) if pch else ()), "-c", src, "-o", out], what, remove=d,
                         key=key)
        except KernelCompileError as e:
            if pch is None or not _PCH_FAULT.search(str(e)):
                raise  # the source's own error (or time)
            with _PCH_LOCK:  # the header's: built again at the next compile, this one compiled without it
                if _PCH.get(tuple(base)) == pch:
                    del _PCH[tuple(base)]
            run_compiler([*base, "-c", src, "-o", out], what, remove=d, key=key)
        with open(out, "rb") as f:
            return f.read()


__all__ = ["DEFAULT_ARCH", "HIP_OPTIONS", "compile_hip", "compiler_id", "hip_compiler", "hip_unavailable",
           "hiprtc_version"]
