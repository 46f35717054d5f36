"""The kernel cache on disk: compiled artifacts keyed by (source hash, target, compiler version and flags).

Files live under ``$TENSORWIRE_KERNEL_CACHE`` (default ``~/.cache/tensorwire/kernels``), one folder per
target: ``<key>.<src ext>`` (the source, kept so a compile error can name it), ``<key>.<bin ext>`` and
``<key>.<bin ext>.sha256`` (the artifact's digest). A build writes to a temporary name and renames it into place,
so concurrent workers never read half a file.

What is loaded is what this user built (issue 34):

* the folders are created 0700, and a cache whose folder (or a folder above it, unless sticky like ``/tmp``) other
  users can write or another user owns is refused with :class:`UnsafeKernelCache`: nothing is read from it or
  built into it (the CPU then interprets its fragments);
* a build always compiles the source generated now (written afresh, never a ``.c`` found on disk) and records
  ``sha256(key, artifact)`` beside the artifact; a cached artifact is used only if it is a regular file of this
  user that nobody else can write and its bytes hash to that record. Anything else is treated as absent: rebuilt
  over, and logged;
* the cache holds at most ``$TENSORWIRE_KERNEL_CACHE_BYTES`` (default 512 MiB) over all its targets: each build
  deletes the least recently used entries (a hit touches its artifact) until it fits. Unlinking is safe for
  libraries a worker has mapped; a worker whose artifact vanished between the check and the load builds it again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None

from tensorwire.protocol.errors import ConfigurationError, DeviceError

from .program import debug_kernels, print_source

CACHE_ENV = "TENSORWIRE_KERNEL_CACHE"
BYTES_ENV = "TENSORWIRE_KERNEL_CACHE_BYTES"
#: ~18 KiB a CPU fragment (library and source): ~29,000 fragments
DEFAULT_BYTES = 512 << 20
DIGEST_EXT = ".sha256"
#: builds between two scans of the cache's folders for eviction (see :meth:`KernelCache._evict`)
RESCAN_BUILDS = 32
#: a build's expected CPU seconds a byte of source before this process has measured any (gcc -O3 on the CPU's C
#: kernels, 2 to 250 KB: 25-60 us a byte, ~40 on average; see :meth:`KernelCache.expected_seconds`), and how many
#: bytes of builds that guess weighs as (this process's builds soon outweigh it)
BUILD_RATE = 40e-6
BUILD_RATE_WEIGHT = 64 << 10
_TMP = "tmp"  # the prefix of every temporary name (a key is hexadecimal: it never starts so)

log = logging.getLogger("tensorwire.kernels")
_logged: set[str] = set()


class KernelCompileError(DeviceError):
    """A generated kernel failed to compile: a bug in the kernel compiler (the message names the source file)."""


class NotCached(Exception):
    """A kernel that is not in the cache, asked for within :func:`cached_only` (nothing was built). ``seconds``: what
    building it is expected to cost (:meth:`KernelCache.expected_seconds`)."""

    def __init__(self, message: str, seconds: float = 0.0):
        super().__init__(message)
        self.seconds = seconds


_CACHED_ONLY = threading.local()


@contextmanager
def cached_only() -> Iterator[None]:
    """Within it, on this thread, a kernel absent from the cache (or failing its check) raises :class:`NotCached`
    instead of being built: a caller that would compile only when the compiler need not run (a hot plan whose
    kernels a run before built: ``backends/hot.py``) finds out what it costs without paying it."""
    before = getattr(_CACHED_ONLY, "on", False)
    _CACHED_ONLY.on = True
    try:
        yield
    finally:
        _CACHED_ONLY.on = before


def holds_nothing() -> bool:
    """Whether the kernel cache holds nothing but temporaries, for any target (or is not there yet): then no
    :func:`cached_only` look-up can hit, and a caller that would only look its kernels up may skip making their
    source. A hot plan's look-up plans its fragment again, lowers and renders it (~4 ms of CPU a char-RNN
    fragment, on the compile thread that shares the GIL with the plans' runs: issue 37's cold runs, with an empty
    cache, spent ~240M instructions there to learn that nothing was cached). Conservative: anything in the root
    but target folders, or a folder it cannot read, counts as something (the look-up then runs and says what is
    wrong). A scan that stops at the first entry found; one of an empty cache costs a few syscalls."""
    try:
        with os.scandir(cache_root()) as top:
            folders = list(top)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for f in folders:
        if not f.is_dir(follow_symlinks=False):
            return False
        try:
            with os.scandir(f.path) as it:
                if any(entry_key(e.name) is not None for e in it):
                    return False
        except OSError:
            return False
    return True


def entry_key(name: str) -> str | None:
    """The key of the cache entry a file of a target's folder belongs to (a source, its artifact and the artifact's
    digest share one: ``<key>.c``, ``<key>.so``, ``<key>.so.sha256``); None for a temporary a build is writing."""
    if name.startswith(_TMP) or name.endswith(".tmp"):
        return None
    return name.split(".", 1)[0]


class UnsafeKernelCache(ConfigurationError):
    """The kernel cache's folder, or one above it, can be written by another user or belongs to one: nothing is
    loaded from it or built into it. The message names the folder and how to fix it."""


def cache_root() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tensorwire", "kernels")
    return Path(root)


def max_bytes() -> int:
    """The cache's bound in bytes (``$TENSORWIRE_KERNEL_CACHE_BYTES``, default :data:`DEFAULT_BYTES`)."""
    raw = os.environ.get(BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_BYTES
    try:
        return max(0, int(raw))
    except ValueError:
        _log_once(logging.WARNING, f"{BYTES_ENV}={raw!r} is not a number of bytes; using {DEFAULT_BYTES}")
        return DEFAULT_BYTES


def _log_once(level: int, msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        log.log(level, msg)


def _describe(kernels) -> str:
    """Which ops and dtypes a kernel set computes (for compile errors)."""
    parts = []
    for k in kernels or ():
        dts = sorted({b.dtype.name for b in k.bufs})
        parts.append(f"{k.name} ({', '.join(dts)})")
    return "; ".join(parts)


# -- trust ------------------------------------------------------------------------------------------------------------

def _cpu_seconds() -> float:
    """CPU seconds of this thread and of this process's children waited for (a compiler process, its own children
    included): what a build costs, in the time a plan's runs are measured in (``time.thread_time``)."""
    if resource is None:  # (Windows)
        return time.thread_time()
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.thread_time() + r.ru_utime + r.ru_stime


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None  # (no owners to check on Windows)


def _unsafe(path: Path, why: str, detail: str) -> UnsafeKernelCache:
    err = UnsafeKernelCache(
        f"the kernel cache {path} {why} ({detail}): another user could make this worker run their code, so "
        f"compiled kernels are off and fragments run interpreted. Make it private (chmod 700, owned by this user, "
        f"in folders only this user or root can change) or point ${CACHE_ENV} at such a folder (default "
        f"~/.cache/tensorwire/kernels)")
    _log_once(logging.ERROR, str(err))
    return err


def _folder_problem(path: Path, own: bool) -> str | None:
    """What lets another user change ``path``, or None: the cache's own folders (``own``) must belong to this user
    and be writable by nobody else; a folder above may be root's, and writable by others only if sticky (``/tmp``:
    others cannot rename what is ours there)."""
    uid = _uid()
    if uid is None:
        return None
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if own and st.st_uid != uid:
        return f"{path} belongs to uid {st.st_uid}, not to this worker's uid {uid}"
    if not own and st.st_uid not in (0, uid):
        return f"{path} belongs to uid {st.st_uid}, neither this worker's uid {uid} nor root"
    if mode & 0o022 and (own or not mode & stat.S_ISVTX):
        return f"{path} is writable by other users (mode {mode:o})"
    return None


def _check_folder(path: Path, subject: Path) -> None:
    """Raise :class:`UnsafeKernelCache` about ``subject`` if another user can change ``path`` (``subject`` itself,
    or a folder above it)."""
    problem = _folder_problem(path, own=path == subject)
    if problem is not None:
        raise _unsafe(subject, "is not private" if path == subject else "is not safe", problem)


def _make_private(path: Path) -> None:
    """``mkdir -p`` whose new folders (parents included) are 0700."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


def trusted_root() -> Path:
    """The cache's root folder, created 0700, symlinks resolved, checked (:func:`_check_folder`) with every folder
    above it; raises :class:`UnsafeKernelCache`. Callers use the path it returns, so a symlink swapped after the
    check cannot redirect them."""
    root = cache_root()
    _make_private(root)
    root = root.resolve()
    for above in reversed(root.parents):
        _check_folder(above, root)
    _check_folder(root, root)
    return root


def _read_trusted(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user that nobody else can write (not following a
    symlink); None if absent. Raises ``PermissionError`` naming what is wrong with it otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink (ELOOP), unreadable...
        raise PermissionError(f"{path} cannot be opened as a plain file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        uid = _uid()
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{path} is not a regular file")
        if uid is not None and st.st_uid != uid:
            raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this worker's uid {uid}")
        if uid is not None and st.st_mode & 0o022:
            raise PermissionError(f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})")
        return f.read()


def digest(key: str, artifact: bytes) -> str:
    """What ``<key><bin ext>.sha256`` records: the artifact's bytes bound to the key they were built for (an
    artifact renamed to another key does not match)."""
    return hashlib.sha256(key.encode() + b"\0" + artifact).hexdigest()


# -- the cache --------------------------------------------------------------------------------------------------------

class KernelCache:
    """Compiled kernels of one target, on disk."""

    def __init__(self, target: str, compiler_id: str):
        self.target, self.compiler_id = target, compiler_id
        self.hits = self.builds = self.rejected = self.evicted = 0
        #: CPU seconds this process's builds took (the compiler's, or the thread's where it runs in-process) and
        #: their sources' bytes: the rate :meth:`expected_seconds` goes by
        self.build_seconds, self.build_bytes = 0.0, 0
        #: the cache's bytes at the last scan plus what this process built since (None: not scanned yet), and the
        #: builds since that scan (see :meth:`_evict`)
        self._bytes: int | None = None
        self._unscanned = 0

    def key(self, source: str) -> str:
        h = hashlib.sha256()
        for part in (self.target, self.compiler_id, source):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def folder(self) -> Path:
        """This target's folder (created 0700 and checked; raises :class:`UnsafeKernelCache`)."""
        d = trusted_root() / self.target
        _make_private(d)
        _check_folder(d, d)
        return d

    def get_or_build(self, source: str, src_ext: str, bin_ext: str, build: Callable[[str, str], None],
                     kernels=None, what: str = "", rebuild: bool = False) -> str:
        """The path of the verified compiled artifact of ``source``, building it with ``build(src, out)`` if it is
        absent or fails its check (or ``rebuild``)."""
        return str(self._get(source, src_ext, bin_ext, build, kernels, what, rebuild)[0])

    def get_or_build_bytes(self, source: str, src_ext: str, bin_ext: str, build: Callable[[str], bytes],
                           kernels=None) -> bytes:
        """Like :meth:`get_or_build` for compilers that return the artifact (NVRTC, OpenCL binaries): the verified
        bytes themselves (never read again after the check)."""
        def to_file(src_path: str, out_path: str) -> None:
            Path(out_path).write_bytes(build(src_path))
        return self._get(source, src_ext, bin_ext, to_file, kernels, "", False)[1]

    def _get(self, source: str, src_ext: str, bin_ext: str, build: Callable[[str, str], None], kernels, what: str,
             rebuild: bool) -> tuple[Path, bytes]:
        d = self.folder()
        key = self.key(source)
        out = d / f"{key}{bin_ext}"
        if not rebuild:
            data = self._cached(key, out)
            if data is not None:
                self.hits += 1
                return out, data
        if getattr(_CACHED_ONLY, "on", False):
            raise NotCached(f"{what or _describe(kernels)} is not in the kernel cache {d}",
                            self.expected_seconds(source))
        cpu0 = _cpu_seconds()
        data = self._build(d, key, source, src_ext, out, build, kernels, what)
        self.build_seconds += max(0.0, _cpu_seconds() - cpu0)
        self.build_bytes += len(source)
        self.builds += 1
        self._evict(d, key, len(source.encode()) + len(data) + 65)  # (the source, the artifact, its digest's line)
        return out, data

    def expected_seconds(self, source: str) -> float:
        """The CPU seconds building ``source`` is expected to take: its length at the rate this process's builds
        have taken (:attr:`build_seconds` over :attr:`build_bytes`), weighed with :data:`BUILD_RATE` (what a build
        costs grows with its source: gcc's time with the kernels in it)."""
        rate = ((self.build_seconds + BUILD_RATE * BUILD_RATE_WEIGHT) / (self.build_bytes + BUILD_RATE_WEIGHT))
        return rate * len(source)

    def _cached(self, key: str, out: Path) -> bytes | None:
        """The artifact's bytes if it is there, this user's, and matches its digest; touched (recently used)."""
        sidecar = out.with_name(out.name + DIGEST_EXT)
        try:
            data = _read_trusted(out)
            if data is None:
                return None
            recorded = _read_trusted(sidecar)
        except PermissionError as e:
            self._reject(f"refusing the cached kernel {out}: {e}; building it again")
            return None
        if recorded is None:  # (a build interrupted, or a cache from before the records: not a sign of tampering)
            self._reject(f"the cached kernel {out} has no recorded sha256 ({sidecar.name}); building it again",
                         logging.INFO)
            return None
        if recorded.decode(errors="replace").strip() != digest(key, data):
            self._reject(f"the cached kernel {out} does not match its recorded sha256 ({sidecar.name}); building "
                         f"it again")
            return None
        try:
            os.utime(out)
        except OSError:  # (evicted meanwhile: the bytes are read, and a library load retries)
            pass
        return data

    def _reject(self, msg: str, level: int = logging.WARNING) -> None:
        self.rejected += 1
        log.log(level, msg)

    def _build(self, d: Path, key: str, source: str, src_ext: str, out: Path, build, kernels, what: str) -> bytes:
        """Compile the generated ``source`` (written afresh: a source file found on disk is never compiled), record
        the artifact's digest, rename both into place; the artifact's bytes."""
        src = d / f"{key}{src_ext}"
        _atomic_write(src, source.encode())
        if debug_kernels():
            print_source(self.target, str(src), source)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=_TMP, suffix=out.suffix + ".tmp")
        os.close(fd)
        try:
            try:
                build(str(src), tmp)
            except KernelCompileError as e:
                raise KernelCompileError(f"{what or _describe(kernels)}: {e} (kernel source: {src})") from None
            os.chmod(tmp, 0o600)  # (a compiler creates its output with the umask's bits: maybe group-writable)
            with open(tmp, "rb") as f:
                data = f.read()
            _atomic_write(out.with_name(out.name + DIGEST_EXT), digest(key, data).encode() + b"\n")
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return data

    def _evict(self, d: Path, keep: str, added: int) -> None:
        """Delete the least recently used entries of every target until the cache fits :func:`max_bytes` (never
        ``keep``, just built, of about ``added`` bytes; nor temporaries: another worker may be writing them, and
        :func:`..codegen.compiler.sweep_stale` removes those a killed worker left). The folders are scanned (a stat
        of every file: ~1 s of CPU for a cache of 10,000 files) at the first build, when the bytes counted since
        the last scan could pass the bound, and every :data:`RESCAN_BUILDS` builds (other processes build into the
        cache too); between scans the builds' bytes are counted."""
        limit = max_bytes()
        if self._bytes is not None and self._unscanned < RESCAN_BUILDS:
            self._bytes += added
            self._unscanned += 1
            if self._bytes <= limit:
                return
        entries: dict[tuple[Path, str], list] = {}  # (folder, key) -> [last use, bytes, paths]
        for folder in _target_folders(d.parent):
            try:
                files = list(os.scandir(folder))
            except OSError:
                continue
            for f in files:
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = entry_key(f.name)
                if key is None:
                    continue
                e = entries.setdefault((folder, key), [0.0, 0, []])
                e[0] = max(e[0], st.st_mtime)
                e[1] += st.st_size
                e[2].append(Path(f.path))
        total = sum(e[1] for e in entries.values())
        for (folder, key), (_, size, paths) in sorted(entries.items(), key=lambda kv: kv[1][0]):
            if total <= limit:
                break
            if folder == d and key == keep:
                continue
            for p in sorted(paths, key=lambda p: p.name.endswith(DIGEST_EXT)):  # the artifact before its digest
                _unlink(p)
            total -= size
            self.evicted += 1
        self._bytes, self._unscanned = total, 0


def _target_folders(root: Path) -> list[Path]:
    """The cache's target folders that this user may evict from (its own, nobody else can write)."""
    out = []
    try:
        subs = list(os.scandir(root))
    except OSError:
        return out
    for s in subs:
        if s.is_dir(follow_symlinks=False):
            try:
                if _folder_problem(Path(s.path), own=True) is None:
                    out.append(Path(s.path))
            except OSError:
                continue
    return out


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # another worker evicted it first
        pass


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise
