"""The Helm chart (deploy/helm/tensorwire), rendered by Helm's own engine and checked without a Kubernetes cluster.

Rendering uses helm-python-sdk (Helm's Go SDK as a library: `helm template` without the binary); the manifests are
validated against the Kubernetes JSON schemas that kubernetes-validate ships (strict: unknown fields fail). Beyond
the schemas: every component is there, every container has probes that run `tensorwire health`, each role's Secret
items are files `tensorwire keys --tokens` writes, every command is a real subcommand with real options, and GPU
values request their device plugin's resource. Then the rendered pods' commands run as processes on loopback (the
Secret's items laid out as the kubelet would, Service names made 127.0.0.1), their probes pass, and a client runs
a training step with backward, an all_reduce and a hub push and load. Skips with the reason where a package is
missing (`pip install -e '.[test]'` installs both). No Kubernetes cluster runs here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tensorwire.cluster import Service, _mpich_segments, _remove_mpich_leftovers, stop_together
from tensorwire.collectives.network import launcher
from tensorwire.protocol.service import free_port
from tests._ci import skip_unless_ci_installed
from tests.deploy.test_compose import help_text
from tests.deploy.test_recipes import CLIENT

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tensorwire"
try:
    import helm_python as helm
except ImportError:
    skip_unless_ci_installed("helm", "helm-python-sdk (Helm's engine) is not installed: pip install helm-python-sdk",
                             module=True)


def render(values: dict | None = None) -> list[dict]:
    """The chart's manifests with ``values`` over the defaults, release ``tw``."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name="tw", namespace="default")
    docs = [d for text in out.values() for d in YAML(typ="safe").load_all(text) if d]
    return docs


def containers(docs: list[dict]) -> dict[str, tuple[dict, dict]]:
    """``component/container`` -> (container, its pod spec), init containers included."""
    out = {}
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            spec = d["spec"]["template"]["spec"]
            comp = d["metadata"]["labels"]["app.kubernetes.io/component"]
            for c in spec.get("initContainers", []) + spec["containers"]:
                out[f"{comp}/{c['name']}"] = (c, spec)
    return out


def tensorwire_lines(c: dict) -> list[list[str]]:
    """The `tensorwire ...` commands a container runs (its args, or the lines of its bash script)."""
    if c.get("command", [None])[0] != "/bin/bash":
        return [["tensorwire", *c["args"]]]
    script = c["args"][0].replace("\\\n", " ")
    return [shlex.split(line[line.index("tensorwire "):].split(" &")[0].split(" >")[0])
            for line in script.splitlines() if re.search(r"(^|\s)tensorwire \w", line)]


DOCS = render()


def test_helm_lint_finds_no_error():
    result = helm.lint(CHART, strict=True)
    assert result["total_charts_linted"] == 1 and not result["errors"], result


def test_default_values_validate_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    assert len(DOCS) >= 7
    for d in DOCS:
        kv.validate(d, kv.latest_version(), strict=True)


def test_the_schema_check_catches_a_bad_manifest():
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    bad = next(d for d in render() if d["kind"] == "Deployment")
    bad["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, kv.latest_version(), strict=True)


def test_every_component_is_there_with_probes_on_tensorwire_health():
    kinds = {(d["kind"], d["metadata"]["name"]) for d in DOCS}
    for want in [("Deployment", "tw-tensorwire-dispatcher"), ("Service", "tw-tensorwire-dispatcher"),
                 ("StatefulSet", "tw-tensorwire-workers"), ("Deployment", "tw-tensorwire-autograd"),
                 ("Deployment", "tw-tensorwire-hub"), ("PersistentVolumeClaim", "tw-tensorwire-hub"),
                 ("Service", "tw-tensorwire-hub")]:
        assert want in kinds, want
    for name, (c, _) in containers(DOCS).items():
        if name == "hub/write-token":
            continue
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            cmd = c[probe]["exec"]["command"]
            assert cmd[:2] == ["tensorwire", "health"] or "exec tensorwire health " in cmd[-1], (name, probe)


def test_each_role_mounts_only_its_files_and_they_are_the_keys_files(tmp_path):
    subprocess.run([sys.executable, "-m", "tensorwire.cli", "keys", "--dir", str(tmp_path), "--tokens"], check=True,
                   capture_output=True, timeout=60)
    made = {p.name for p in tmp_path.iterdir() if p.is_file()}  # `kubectl create secret --from-file=keys/` takes these
    for name, (c, spec) in containers(DOCS).items():
        vols = {v["name"]: v for v in spec["volumes"]}
        if not any(m["name"] == "keys" for m in c.get("volumeMounts", [])):
            continue
        items = vols["keys"]["secret"]["items"]
        assert {i["key"] for i in items} <= made, name
        paths = {i["path"] for i in items}
        if name.startswith("dispatcher/"):
            assert {"dispatcher.key_secret", "clients/client.key", "services/service.key", "admin.token",
                    "service.token"} <= paths
        else:  # a service holds its own pair and credential, never the dispatcher's secret or the admin token
            assert {"service.key_secret", "service.token"} <= paths, name
            assert not {"dispatcher.key_secret", "admin.token"} & paths, name


def test_commands_and_probes_are_cli_subcommands_with_their_options():
    for name, (c, _) in containers(DOCS).items():
        argvs = [line[1:] for line in tensorwire_lines(c)]
        for probe in ("readinessProbe",) if "readinessProbe" in c else ():
            cmd = c[probe]["exec"]["command"]
            argvs.append(cmd[1:] if cmd[0] == "tensorwire" else shlex.split(cmd[-1].split("exec tensorwire ")[1]))
        assert argvs, name
        for argv in argvs:
            text = help_text(argv)
            for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", " ".join(argv)):  # (printf's too)
                assert re.search(rf"(^|[\s\[]){re.escape(opt)}\b", text), f"{name}: `{' '.join(argv)}`: no {opt}"


@pytest.mark.parametrize("backend,resource", [("cuda", "nvidia.com/gpu"), ("rocm", "amd.com/gpu")])
def test_gpu_workers_request_their_device_plugins_resource(backend, resource):
    docs = render({"workers": {"backend": backend, "devicesPerPod": 4}})
    c, _ = containers(docs)["workers/workers"]
    assert c["resources"]["limits"][resource] == 4
    assert f"{backend}:$((k * 4 + i))" in c["args"][0]


def test_gpu_pods_name_their_devices_cluster_wide_and_open_their_own():
    """Several GPU pods: pod k's GPUs are named after pod k-1's, and each worker opens its pod's GPU i."""
    docs = render({"workers": {"backend": "cuda", "replicas": 3, "devicesPerPod": 2},
                   "collectives": {"enabled": False}})
    script = containers(docs)["workers/workers"][0]["args"][0]
    pod_devices = script.splitlines()[0]
    env = {**os.environ, "HOSTNAME": "tw-tensorwire-workers-2"}
    got = subprocess.run(["bash", "-c", pod_devices + '; echo $devices'], env=env, capture_output=True, text=True,
                         timeout=30).stdout.split()
    assert got == ["cuda:4", "cuda:5"], got
    assert '--device "$d" --local-index "$i"' in script


def test_values_that_cannot_work_fail_with_the_reason():
    with pytest.raises(helm.HelmError, match="one job cannot span pods"):
        render({"workers": {"replicas": 2}})
    docs = render({"workers": {"replicas": 5, "devicesPerPod": 2}, "collectives": {"enabled": False}})
    assert "collectives" not in {c["name"] for c, _ in containers(docs).values()}


def lay_out_secret(keys: Path, items: list[dict], into: Path) -> None:
    """Put the Secret's items where the kubelet would mount them."""
    for i in items:
        (into / i["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(keys / i["key"], into / i["path"])


def test_the_rendered_pods_run_a_training_step(tmp_path):
    """Each container's command (its args, or its bash script) runs as a process: probes, the workers' supervisor
    and the collectives' wait-then-mpiexec included."""
    if launcher(2) is None:
        pytest.skip("the collectives need MPI: pip install -e '.[mpi]'")
    ports = {"client": free_port(), "service": free_port(), "hub": free_port()}
    docs = render({"ports": ports})
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "tensorwire.cli", "keys", "--dir", str(keys), "--tokens"], check=True,
                   capture_output=True, timeout=60)
    shm = tempfile.mkdtemp(prefix="tensorwire-k8s-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # tensorwire and mpiexec.gforker
    base = {k: v for k, v in os.environ.items() if not k.startswith("TENSORWIRE_")}
    base.update(PATH=path, TENSORWIRE_SHM_DIR=shm)

    def local(text: str, pod: Path) -> str:
        text = re.sub(r"tw-tensorwire-(dispatcher|hub)\b", "127.0.0.1", text)
        return text.replace("/keys", str(pod / "keys")).replace("/hubdata", str(pod / "hubdata"))

    services: list[Service] = []
    probes: list[tuple[str, list[str], dict]] = []
    order = ["hub/write-token", "hub/hub", "dispatcher/dispatcher", "autograd/autograd", "workers/workers",
             "workers/collectives"]
    pods = containers(docs)
    segments, since = _mpich_segments(), time.time()  # (a pod's /dev/shm goes with it; here it is the host's)
    try:
        for name in order:
            c, spec = pods[name]
            pod = tmp_path / name.split("/")[0]
            keys_vol = next((v for v in spec["volumes"] if v["name"] == "keys"), None)
            if keys_vol and not (pod / "keys").exists():
                lay_out_secret(keys, keys_vol["secret"]["items"], pod / "keys")
            (pod / "hubdata").mkdir(parents=True, exist_ok=True)
            env = {**base, "HOSTNAME": "tw-tensorwire-workers-0", **{e["name"]: e["value"] for e in c.get("env", [])}}
            argv = [local(a, pod) for a in [*c.get("command", ["tensorwire"]), *c["args"]]]
            if name == "hub/write-token":
                r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
                continue
            svc = Service(name, argv, tmp_path / f"{name.replace('/', '-')}.log", env,
                          launcher=name.endswith("/collectives"))  # (mpiexec: done once its ranks are)
            services.append(svc)
            if c.get("command") is None:  # a tensorwire service: its readiness line
                svc.wait_ready(time.monotonic() + 60)
            probes.append((name, [local(a, pod) for a in c["readinessProbe"]["exec"]["command"]], env))
        deadline = time.monotonic() + 120
        for name, cmd, env in probes:  # the readiness probes pass, as the kubelet would run them
            while (r := subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)).returncode:
                assert time.monotonic() < deadline, f"{name}: {r.stderr}\n" + "\n".join(
                    f"== {f.name}\n{f.read_text()[-2000:]}" for f in tmp_path.glob("*.log"))
                time.sleep(0.5)
        client = tmp_path / "client"
        client.mkdir()
        (client / "train.py").write_text(CLIENT)
        shutil.copy(tmp_path / "hub" / "hubdata" / "deploy-write.token", client / "hub-write.token")
        env = {**base, "TENSORWIRE_ADDRESS": f"tcp://127.0.0.1:{ports['client']}", "TENSORWIRE_KEYS": str(keys),
               "TENSORWIRE_TOKEN": (keys / "client.token").read_text().strip()}
        r = subprocess.run([sys.executable, "train.py"], cwd=client, env=env, capture_output=True, text=True,
                           timeout=180)
        assert "CLIENT OK" in r.stdout, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    finally:
        stop_together(services)
        _remove_mpich_leftovers(segments, since)
        shutil.rmtree(shm, ignore_errors=True)
    # SIGTERM to a pod's command stops all it started (the workers' script stops its workers; mpiexec its ranks)
    left = [p for p in Path("/proc").glob("[0-9]*") if str(tmp_path) in read_cmdline(p)]
    assert not left, [read_cmdline(p) for p in left]


def read_cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
