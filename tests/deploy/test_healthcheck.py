"""``tensorwire health``: its three probes against a real cluster, and what each loads.

The hub's probe (compose.yaml's healthcheck every 30 s) loads neither zmq, numpy nor the client's session; the
dispatcher ping (:mod:`tensorwire.healthcheck_zmq`) loads zmq and the wire but not the session; only a
``--device``/``--service`` check opens a session.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tensorwire.healthcheck import main
from tensorwire.protocol.service import free_port

#: run ``main(argv)`` in a fresh interpreter; print its exit status and which of the heavy modules it loaded
_PROBE = """
import json, sys
from tensorwire.healthcheck import main
rc = main(json.loads(sys.argv[1]))
heavy = ("zmq", "numpy", "tensorwire.session", "tensorwire.healthcheck_zmq")
print(json.dumps({"rc": rc, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def probe(argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]) | {"stderr": r.stderr}


def test_the_hub_probe_loads_neither_zmq_numpy_nor_the_session():
    got = probe([f"http://127.0.0.1:{free_port()}", "--timeout", "2"])  # nothing listens there
    assert got["rc"] == 1 and "unhealthy: ServiceUnavailable: no answer from the hub" in got["stderr"]
    assert got["loaded"] == []


def test_a_dispatcher_ping_loads_zmq_but_not_the_session(cluster):
    got = probe([cluster.address])
    assert got["rc"] == 0, got["stderr"]
    assert "tensorwire.healthcheck_zmq" in got["loaded"] and "tensorwire.session" not in got["loaded"]


def test_the_dispatcher_answers_a_ping_and_lists_its_workers_and_services(cluster, capsys):
    assert main([cluster.address]) == 0
    assert capsys.readouterr().out.strip() == f"healthy: {cluster.address}"
    assert main([cluster.address, "--device", "cpu:0", "--device", "cpu:1", "--service", "autograd"]) == 0
    assert main([cluster.address, "--device", "cpu:7"]) == 1
    err = capsys.readouterr().err
    assert "unhealthy: ServiceUnavailable: not registered with the dispatcher" in err and "cpu:7" in err


def test_no_dispatcher_is_unhealthy_with_the_reason(capsys):
    assert main([f"tcp://127.0.0.1:{free_port()}", "--timeout", "0.5"]) == 1
    assert "unhealthy: ConnectionFailed: no answer from a tensorwire dispatcher" in capsys.readouterr().err
