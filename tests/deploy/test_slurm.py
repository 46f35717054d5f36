"""`tensorwire slurm`: the sbatch script it writes, run for real on a one-node Slurm cluster this module starts.

The cluster is Debian's slurm-wlm (`.ci/run` installs it): munged with a key made here, slurmctld and slurmd in
the foreground on localhost, as root, with a slurm.conf written to a temporary folder (free ports, no cgroups:
proctrack/linuxproc). The generated script is submitted with sbatch; a client beside the job runs the README
recipe's training step (a forward across two workers, `loss.backward()`, an all_reduce, a hub push and load);
then `scancel` must end the job through the script's trap, leaving no process of the job and its ports free.
Skips, with the reason, where Slurm is not installed or this is not root. Measured: ~40 s on the 2-core machine.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensorwire.cluster import _mapped_files
from tensorwire.collectives.network import launcher
from tensorwire.protocol.service import free_port
from tests._ci import skip_unless_ci_installed
from tests.deploy.test_recipes import CLIENT

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorwire.cli", "slurm", *args], capture_output=True, text=True,
                          timeout=60)


def test_script_is_valid_bash_with_one_worker_and_rank_per_device(tmp_path):
    r = run_cli("--workers-per-node", "2", "--nodes", "3", "--mpi-iface", "eth0", "--time", "1:00:00",
                "-o", str(tmp_path / "tw.sbatch"))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "tw.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "tw.sbatch")], capture_output=True).returncode == 0
    for line in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=2", "#SBATCH --time=1:00:00",
                 "DEVICES=cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5", "export TENSORWIRE_MPI_IFACE=eth0", "--mpi=pmi2",
                 "trap 'stop 0' TERM INT"):
        assert line in text, line
    gpu = run_cli("--gpus-per-node", "4").stdout
    assert "#SBATCH --gres=gpu:4" in gpu and "DEVICES=cuda:0,cuda:1,cuda:2,cuda:3" in gpu and "LOCALS=0,1,2,3" in gpu


def test_gpus_on_several_nodes_get_cluster_wide_names_and_open_their_nodes_own():
    """Node k's GPUs follow node k-1's in the cluster's names; each worker opens its GPU by its index on its node
    (``--local-index``), so two nodes' first GPUs are cuda:0 and cuda:2, not two cuda:0."""
    r = run_cli("--nodes", "2", "--gpus-per-node", "2", "--mpi-iface", "ib0")
    assert r.returncode == 0, r.stderr
    assert "DEVICES=cuda:0,cuda:1,cuda:2,cuda:3" in r.stdout and "LOCALS=0,1,0,1" in r.stdout, r.stdout
    assert '--local-index "${l[SLURM_PROCID]}"' in r.stdout
    picked = run_cli("--nodes", "2", "--devices", "cuda:0,cuda:2", "--mpi-iface", "ib0").stdout
    assert "DEVICES=cuda:0,cuda:1,cuda:2,cuda:3" in picked and "LOCALS=0,2,0,2" in picked, picked


@pytest.mark.parametrize("args,needle", [
    (["--nodes", "2"], "--mpi-iface"),
    (["--devices", "cpu:0,cpu:0"], "distinct devices"),
])
def test_settings_that_cannot_work_get_one_line(args, needle):
    r = run_cli(*args)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ConfigurationError" in r.stderr and needle in r.stderr, r.stderr


def wait_for(what: str, check, timeout: float, why=lambda: ""):
    """Poll ``check`` (at most ``timeout`` s) until it returns something true; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"{what} not within {timeout:g}s\n{why()}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster on localhost; yields the environment (SLURM_CONF) its commands need."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
    if missing:
        skip_unless_ci_installed("slurm", f"Slurm is not installed ({', '.join(missing)} missing): apt-get install "
                                 "slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the test's Slurm daemons run as root (SlurmUser=root); not root here")
    if launcher(2) is None:
        pytest.skip("the job's collectives need MPI: pip install -e '.[mpi]'")
    host = socket.gethostname().split(".")[0]
    try:
        socket.gethostbyname(host)
    except OSError:
        pytest.skip(f"this host's name {host!r} does not resolve, and the job's services are addressed by it")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("munge", "state", "spool"):
        (d / sub).mkdir(mode=0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = d / "munge" / "munge.socket"
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=twtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=tw Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TENSORWIRE_", "SLURM_"))},
           "SLURM_CONF": str(conf)}
    procs = []

    def logs() -> str:
        return "\n".join(f"== {f.name}\n{f.read_text()[-2000:]}" for f in sorted(d.glob("*.log")))

    try:
        procs.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
             f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge.log", f"--seed-file={d}/munge/seed"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for("munged's socket", sock.exists, 20, logs)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

        def idle() -> bool:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=20)
            return r.stdout.strip() == "idle"

        wait_for("the Slurm node to be idle", idle, 60, logs)
        yield env
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def job_state(env: dict, job: str) -> str:
    r = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=20)
    return next((w.split("=", 1)[1] for w in r.stdout.split() if w.startswith("JobState=")), "gone")


def in_queue(env: dict, job: str) -> bool:
    """The job is still listed by squeue (pending, running or completing: its processes may still be stopping)."""
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True, timeout=20)
    return bool(r.stdout.strip())


def processes_mentioning(text: str) -> list[str]:
    """Command lines of the processes that name ``text`` (the job folder is in every service's arguments)."""
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(f"{p.name}: {cmd}")
    return out


def test_job_runs_a_training_step_and_scancel_stops_it(slurm, tmp_path):
    env = slurm
    ports = [free_port(), free_port(), free_port()]
    r = run_cli("--workers-per-node", "2", "--port", str(ports[0]), "--service-port", str(ports[1]),
                "--hub-port", str(ports[2]), "--wait-s", "120", "-o", str(tmp_path / "tw.sbatch"))
    assert r.returncode == 0, r.stderr
    sub = subprocess.run(["sbatch", "--parsable", "tw.sbatch"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=30)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    segments = set(glob.glob("/dev/shm/mpich_shm_*"))  # (the job's MPI ranks make one; it must be gone at the end)
    job_dir, out = tmp_path / f"tensorwire-{job}", tmp_path / f"tensorwire-{job}.out"

    def why() -> str:
        logs = sorted((job_dir / "logs").glob("*.log")) if job_dir.exists() else []
        return "\n".join(f"== {f.name}\n{f.read_text()[-1500:]}" for f in [out, *logs] if f.exists())

    try:
        def up() -> bool:
            if job_state(env, job) not in ("PENDING", "RUNNING", "CONFIGURING"):
                pytest.fail(f"job {job} ended before the cluster was up: {job_state(env, job)}\n{why()}")
            return (job_dir / "cluster.env").exists()

        wait_for("the job's cluster", up, 180, why)
        assert "tensorwire cluster up in job" in out.read_text()
        (job_dir / "train.py").write_text(CLIENT)  # (it reads hub-write.token from its folder: the job's)
        client = subprocess.run(["bash", "-c", f"source cluster.env && exec {sys.executable} train.py"],
                                cwd=job_dir, env=env, capture_output=True, text=True, timeout=180)
        assert "CLIENT OK" in client.stdout, f"{client.stdout[-3000:]}\n{client.stderr[-3000:]}\n{why()}"
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    wait_for(f"job {job} to end after scancel", lambda: not in_queue(env, job), 60, why)
    assert job_state(env, job) in ("CANCELLED", "gone")
    text = out.read_text()
    assert "tensorwire: stopped" in text and "killed" not in text, text
    wait_for("the job's processes to exit", lambda: not processes_mentioning(str(job_dir)), 30,
             lambda: "\n".join(processes_mentioning(str(job_dir))))
    assert not (job_dir / "cluster.env").exists()
    left = set(glob.glob("/dev/shm/mpich_shm_*")) - segments - _mapped_files()  # (other MPI jobs' are mapped)
    assert not left, f"the job left MPICH shared memory behind: {left}"
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (connections the services closed may linger)
            s.bind(("0.0.0.0", port))  # no listener left


def test_a_service_that_cannot_start_ends_the_job_naming_it(slurm, tmp_path):
    env = slurm
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        r = run_cli("--workers-per-node", "1", "--port", str(free_port()), "--service-port", str(free_port()),
                    "--hub-port", str(taken.getsockname()[1]), "-o", str(tmp_path / "tw.sbatch"))
        assert r.returncode == 0, r.stderr
        sub = subprocess.run(["sbatch", "--parsable", "tw.sbatch"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=30)
        assert sub.returncode == 0, sub.stderr
        job = sub.stdout.strip().split(";")[0]
        out = tmp_path / f"tensorwire-{job}.out"
        wait_for(f"job {job} to end", lambda: not in_queue(env, job), 90, lambda: out.read_text())
    text = out.read_text()
    assert "tensorwire: hub exited before hub was ready" in text and "tensorwire: stopped" in text, text
    assert "already in use" in (tmp_path / f"tensorwire-{job}" / "logs" / "hub.log").read_text()
    assert not processes_mentioning(str(tmp_path / f"tensorwire-{job}"))
