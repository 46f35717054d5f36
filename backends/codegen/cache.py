"""The kernel cache on disk: compiled artifacts keyed by (source hash, target, compiler version and flags).

Files live under ``$TENSORWIRE_KERNEL_CACHE`` (default ``~/.cache/tensorwire/kernels``), one folder per
target: ``<key>.<src ext>`` (the source, kept so a compile error can name it) and ``<key>.<bin ext>``. A
build writes to a temporary name and renames it into place, so concurrent workers never read half a file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from tensorwire.protocol.errors import DeviceError

from .program import debug_kernels, print_source

CACHE_ENV = "TENSORWIRE_KERNEL_CACHE"


class KernelCompileError(DeviceError):
    """A generated kernel failed to compile: a bug in the kernel compiler (the message names the source file)."""


def cache_root() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tensorwire", "kernels")
    return Path(root)


def _describe(kernels) -> str:
    """Which ops and dtypes a kernel set computes (for compile errors)."""
    parts = []
    for k in kernels or ():
        dts = sorted({b.dtype.name for b in k.bufs})
        parts.append(f"{k.name} ({', '.join(dts)})")
    return "; ".join(parts)


class KernelCache:
    """Compiled kernels of one target, on disk."""

    def __init__(self, target: str, compiler_id: str):
        self.target, self.compiler_id = target, compiler_id
        self.hits = self.builds = 0

    def key(self, source: str) -> str:
        h = hashlib.sha256()
        for part in (self.target, self.compiler_id, source):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def folder(self) -> Path:
        d = cache_root() / self.target
        d.mkdir(parents=True, exist_ok=True)
        return d

    def get_or_build(self, source: str, src_ext: str, bin_ext: str, build: Callable[[str, str], None],
                     kernels=None, what: str = "") -> str:
        """The path of the compiled artifact of ``source``, building it with ``build(src, out)`` if needed."""
        d = self.folder()
        key = self.key(source)
        out = d / f"{key}{bin_ext}"
        if out.exists():
            self.hits += 1
            return str(out)
        src = d / f"{key}{src_ext}"
        if not src.exists():
            _atomic_write(src, source.encode())
        if debug_kernels():
            print_source(self.target, str(src), source)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=bin_ext + ".tmp")
        os.close(fd)
        try:
            try:
                build(str(src), tmp)
            except KernelCompileError as e:
                raise KernelCompileError(f"{what or _describe(kernels)}: {e} (kernel source: {src})") from None
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.builds += 1
        return str(out)

    def get_or_build_bytes(self, source: str, src_ext: str, bin_ext: str, build: Callable[[str], bytes],
                           kernels=None) -> bytes:
        """Like :meth:`get_or_build` for compilers that return the artifact (NVRTC, OpenCL binaries)."""
        def to_file(src_path: str, out_path: str) -> None:
            Path(out_path).write_bytes(build(src_path))
        return Path(self.get_or_build(source, src_ext, bin_ext, to_file, kernels)).read_bytes()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
