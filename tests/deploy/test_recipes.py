"""The README's multi-host recipe, run as written as separate processes on loopback, and the CLI's one-line errors.

The recipe's bash block is taken from README.md and run line by line (bash, in a scratch folder) with only these
changes, which make several hosts one: host names and 0.0.0.0 become 127.0.0.1, the ports 5555/5556/8700 free
ports, `TENSORWIRE_MPI_IFACE=eth0` becomes `lo`, the multi-host `mpiexec -hosts ...` MPICH's single-host launcher,
and `python train.py` a client that runs a forward, `loss.backward()`, an all_reduce and a hub push and load.
Services are started in the recipe's order and waited for by their readiness lines (the collectives' second rank
by `tensorwire health`). Measured: ~20 s on the 2-core machine.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tensorwire.cluster import Service, stop_together
from tensorwire.collectives.network import launcher
from tensorwire.protocol.errors import ConfigurationError, ServiceUnavailable
from tensorwire.protocol.service import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
SERVICES = {"dispatcher", "worker", "autograd", "collectives"}  # `tensorwire hub --root ...` serves too

CLIENT = textwrap.dedent(
    """
    import numpy as np
    import tensorwire as tw

    tw.connect()  # TENSORWIRE_ADDRESS, TENSORWIRE_KEYS and TENSORWIRE_TOKEN, as the recipe sets them
    tw.manual_seed(0)
    w = tw.randn(4, 3, device="cpu:0", requires_grad=True)
    x = tw.randn(8, 4, device="cpu:1")
    loss = ((x.to("cpu:0") @ w).relu() ** 2).sum()  # a forward across both workers
    loss.backward()  # the autograd service
    xn, wn = x.numpy(), w.detach().numpy()
    np.testing.assert_allclose(w.grad.numpy(), xn.T @ (2 * np.maximum(xn @ wn, 0)), rtol=1e-4, atol=1e-4)
    parts = [tw.full((5,), float(i + 1), device=f"cpu:{i}") for i in range(2)]
    tw.distributed.all_reduce(parts, op="sum")  # the collectives' MPI job
    for p in parts:
        np.testing.assert_array_equal(p.numpy(), np.full(5, 3.0, np.float32))
    model = tw.nn.Linear(3, 2)
    tw.hub.push("ops/lin", model, token=open("hub-write.token").read().strip())  # the hub, with its write token
    state = tw.hub.load_state_dict("ops/lin", device="cpu:1")  # the worker fetches from the configured hub
    np.testing.assert_array_equal(state["weight"].numpy(), model.weight.detach().numpy())
    print("CLIENT OK")
    """
)


def recipe_lines(text: str) -> list[str]:
    """The commands of the README's multi-host recipe: continuations joined, comments dropped."""
    section = text[text.index("## Running services on separate hosts") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    out = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(line.split(" # ")[0].split("  # ")[0].strip())
    return out


def loopback(line: str, ports: dict[str, int]) -> str:
    """One recipe line with several hosts made one (see the module docstring)."""
    line = re.sub(r"\bhost[A-Z]\b", "127.0.0.1", line).replace("0.0.0.0", "127.0.0.1")
    for old, new in ports.items():
        line = re.sub(rf"(:|--port ){old}\b", rf"\g<1>{new}", line)
    line = line.replace("TENSORWIRE_MPI_IFACE=eth0", "TENSORWIRE_MPI_IFACE=lo")
    line = re.sub(r"mpiexec -hosts \S+ -n (\d+)", lambda m: shlex.join(launcher(int(m.group(1)))), line)
    return line.replace("python train.py", f"{shlex.quote(sys.executable)} train.py")


def kind(line: str) -> str | None:
    """The service a line starts (None for a command that runs to its end)."""
    words = [w for w in shlex.split(line) if not re.match(r"^[A-Z_]+=", w)]
    if "tensorwire" not in words:
        return None
    sub = words[words.index("tensorwire") + 1 :]
    if sub[0] in SERVICES or (sub[0] == "hub" and sub[1].startswith("--")):
        return sub[0]
    return None


def wait_registered(address: str, names: list[str], env: dict, deadline: float) -> None:
    from tensorwire.healthcheck import check_registered

    token = (Path(env["PWD"]) / "keys" / "client.token").read_text().strip()
    for _ in range(1000):  # bounded by the deadline
        try:
            check_registered(address, [], names, token=token, keys=Path(env["PWD"]) / "keys", timeout=10)
            return
        except ServiceUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the rank registers within a second of the first one


#: tries at starting the recipe: its free ports are picked before its services bind them, and under ``-n auto``
#: another test's server may take one in between (a dispatcher then refuses its port as already in use)
RECIPE_TRIES = 3


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """The recipe's services running; yields (folder, environment, {recipe port: real port}, lines left to run)."""
    if launcher(2) is None:
        pytest.skip("the recipe's collectives need MPI: pip install -e '.[mpi]'")
    for attempt in range(RECIPE_TRIES):
        work = tmp_path_factory.mktemp("recipe")
        (work / "train.py").write_text(CLIENT)
        ports = {"5555": free_port(), "5556": free_port(), "8700": free_port()}  # (the recipe's: the README's ports)
        shm = tempfile.mkdtemp(prefix="tensorwire-recipe-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORWIRE_")}
        env.update(PWD=str(work), TENSORWIRE_SHM_DIR=shm)
        services: list[Service] = []
        try:
            try:
                later = _start(work, ports, env, services)
            except ConfigurationError as e:
                if "already in use" not in str(e) or attempt == RECIPE_TRIES - 1:
                    raise
                continue  # (a port taken meanwhile: the finally stops what started; new ports)
            yield work, env, ports, later
            return
        finally:
            stop_together(services)
            shutil.rmtree(shm, ignore_errors=True)


def _start(work: Path, ports: dict, env: dict, services: list) -> list[str]:
    """Run the recipe's lines in ``work`` with ``ports`` (its services appended to ``services`` as they start, each
    waited for); returns the lines left to run once every service is up."""
    later: list[str] = []
    deadline = time.monotonic() + 120
    for raw in recipe_lines(README.read_text()):
        line = loopback(raw, ports)
        what = kind(line)
        if what is None:
            if "train.py" in line or line.split()[:2] in (["tensorwire", "status"], ["tensorwire", "health"]):
                later.append(line)  # needs every service up
                continue
            r = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, f"{raw}\n{r.stdout}\n{r.stderr}"
            continue
        svc = Service(
            what,
            ["bash", "-c", f"cd {shlex.quote(str(work))} && exec env {line}"],
            work / f"{what}-{len(services)}.log",
            env,
            launcher=what == "collectives",  # (mpiexec: done once its ranks are)
        )
        services.append(svc)
        svc.wait_ready(deadline)
    address = f"tcp://127.0.0.1:{ports['5555']}"
    wait_registered(address, ["autograd", "collectives@cpu:0", "collectives@cpu:1"], env, deadline)
    return later


def test_recipe_lists_every_service():
    kinds = {kind(line) for line in recipe_lines(README.read_text())}
    assert {"dispatcher", "worker", "autograd", "collectives", "hub"} <= kinds, kinds


def test_multi_host_recipe_runs_forward_backward_collective_and_hub(recipe):
    work, env, _, later = recipe
    assert any("train.py" in line for line in later)
    for line in later:
        r = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{line}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        if "train.py" in line:
            assert "CLIENT OK" in r.stdout
        if " status " in f" {line} ":
            assert "cpu:0" in r.stdout and "cpu:1" in r.stdout and "autograd" in r.stdout, r.stdout


def run_cli(*args: str, env: dict | None = None, cwd=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorwire.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with exactly one line on stderr, no traceback, naming every needle."""
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_worker_with_a_bad_token_gets_one_line(recipe):
    work, env, ports, _ = recipe
    bad = {**env, "TENSORWIRE_SERVICE_TOKEN": "not-the-token"}
    r = run_cli(
        "worker",
        "--device",
        "cpu:5",
        "--dispatcher",
        f"tcp://127.0.0.1:{ports['5556']}",
        "--keys",
        str(work / "keys"),
        env=bad,
    )
    one_line_error(r, "Unauthorized", "refused the service credential", "service.token")


def test_a_port_in_use_gets_one_line(recipe):
    work, env, ports, _ = recipe
    r = run_cli(
        "dispatcher",
        "--address",
        f"tcp://127.0.0.1:{ports['5555']}",
        "--service-address",
        "tcp://127.0.0.1:0",
        env={**env, "TENSORWIRE_SERVICE_TOKEN": "x"},
    )
    one_line_error(r, "ConfigurationError", f"127.0.0.1:{ports['5555']}", "already in use", "--address")
    r = run_cli("hub", "--root", str(work / "hub2"), "--port", str(ports["8700"]), env=env)
    one_line_error(r, "ConfigurationError", "already in use", "--port")
    r = run_cli("up", "--port", str(ports["5555"]), env=env)
    one_line_error(r, "ConfigurationError", "already in use", "--port")


@pytest.mark.parametrize(
    "cmd",
    [
        ["dispatcher", "--address", "127.0.0.1:5555"],
        ["worker", "--dispatcher", "localhost:5556"],
        ["autograd", "--dispatcher", "tcp://127.0.0.1"],
    ],
)
def test_a_bad_address_gets_one_line(cmd):
    r = run_cli(*cmd, env={**os.environ, "TENSORWIRE_SERVICE_TOKEN": "x"})
    one_line_error(r, "ConfigurationError", cmd[-1], "tcp://HOST:PORT")


def test_version():
    import tensorwire as tw

    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"tensorwire {tw.__version__} "), r


def test_up_with_a_hub_binds_the_documented_port_and_says_where_everything_listens(tmp_path):
    """`tensorwire up --hub-root` binds 8700 (tensorwire.protocol.hub.client.DEFAULT_PORT) unless told otherwise. Other
    programs on a shared machine may hold 8700: then the answer must be the one-line error naming --hub-port."""
    import selectors
    import signal

    from tensorwire.protocol.hub.client import DEFAULT_PORT

    assert DEFAULT_PORT == 8700
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorwire.cli",
            "up",
            "--port",
            "0",
            "--hub-root",
            str(tmp_path / "hub"),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=False,
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        out, deadline = b"", time.monotonic() + 120
        while b"Ctrl-C" not in out and time.monotonic() < deadline and proc.poll() is None:
            if sel.select(timeout=1):
                out += os.read(proc.stdout.fileno(), 65536)
        sel.close()
        text = out.decode()
        if "Ctrl-C" not in text:  # 8700 is taken on this machine: the answer must say so, in one line
            proc.wait(60)
            err = proc.stderr.read().decode().strip()
            assert proc.returncode != 0 and len(err.splitlines()) == 1, err
            assert "--hub-port" in err and f":{DEFAULT_PORT}" in err, err
            return
        assert f"http://127.0.0.1:{DEFAULT_PORT}" in text, text
        for name in ("dispatcher", "hub", "cpu:0", "autograd"):
            assert re.search(rf"^\s+{re.escape(name)}\s+\S", text, re.M), (name, text)
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
