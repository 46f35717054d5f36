"""Stopping services (``tensorwire.cluster.stop_together``, what ``LocalCluster.close`` runs): side by side, the
dispatcher after the rest, and a launcher (``mpiexec``) as soon as the processes it launched are gone.

The services here are real processes with the shutdowns under test (a slow one, a launcher that lingers), started
as ``Service`` starts every service; no cluster."""

from __future__ import annotations

import signal
import sys
import time

from tensorwire.cluster import Service, stop_together

#: a service that, asked to stop, notes when (``term``), takes ``SLOW_S`` to finish, and notes when it exits
SLOW = r"""
import signal, sys, time
out, slow = sys.argv[1], float(sys.argv[2])
def on_term(*_):
    open(out, "a").write(f"term {time.time()}\n")
    time.sleep(slow)
    open(out, "a").write(f"exit {time.time()}\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("TENSORWIRE-READY {}", flush=True)
while True:
    time.sleep(1)
"""

#: a launcher as MPICH's gforker behaves: it passes SIGTERM on to its one process, reaps it, then lingers ``linger`` s
LAUNCHER = r"""
import signal, subprocess, sys, time
linger = float(sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
def on_term(*_):
    child.terminate()
    child.wait()
    time.sleep(linger)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("TENSORWIRE-READY {}", flush=True)
while True:
    time.sleep(1)
"""

SLOW_S = 1.0


def _times(path) -> dict[str, float]:
    return {k: float(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def test_services_stop_side_by_side_and_the_dispatcher_after_the_rest(tmp_path):
    names = ["cpu:0", "cpu:1", "dispatcher"]
    services = [Service(n, [sys.executable, "-c", SLOW, str(tmp_path / f"{n}.times"), str(SLOW_S)],
                        tmp_path / f"{n}.log") for n in names]
    deadline = time.monotonic() + 120
    for svc in services:
        svc.wait_ready(deadline)
    stop_together(services, timeout=60)
    t = {n: _times(tmp_path / f"{n}.times") for n in names}
    assert all(svc.proc.returncode == 0 and svc.ended_by_us for svc in services), [s.exit_reason() for s in services]
    # side by side: each worker was asked to stop before the other had finished
    assert t["cpu:1"]["term"] < t["cpu:0"]["exit"] and t["cpu:0"]["term"] < t["cpu:1"]["exit"], t
    # the dispatcher only once the others were gone (they may say goodbye to it as they stop)
    assert t["dispatcher"]["term"] >= max(t["cpu:0"]["exit"], t["cpu:1"]["exit"]), t


def test_a_launcher_is_stopped_once_its_processes_are_gone(tmp_path):
    linger_s, timeout_s = 30.0, 20.0
    svc = Service("collectives", [sys.executable, "-c", LAUNCHER, str(linger_s)], tmp_path / "launcher.log",
                  launcher=True)
    svc.wait_ready(time.monotonic() + 120)
    t0 = time.monotonic()
    stop_together([svc], timeout=timeout_s)
    took = time.monotonic() - t0
    assert svc.proc.returncode == -signal.SIGKILL, svc.exit_reason()  # killed while it lingered ...
    assert took < timeout_s, took  # ... once its process was reaped, not at the timeout


def test_a_service_that_is_not_a_launcher_is_waited_for(tmp_path):
    svc = Service("autograd", [sys.executable, "-c", LAUNCHER, "0.5"], tmp_path / "service.log")
    svc.wait_ready(time.monotonic() + 120)
    stop_together([svc], timeout=60)
    assert svc.proc.returncode == 0, svc.exit_reason()  # its own exit, after what it did on SIGTERM
