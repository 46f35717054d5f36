"""compose.yaml, the Dockerfile and .dockerignore, checked without a Docker engine.

The file is validated against the Compose Specification's JSON schema (the copy `check-jsonschema` vendors, with
its licence: check_jsonschema/builtin_schemas/vendor/compose-spec.json), then for what the schema cannot see:
every service the design has is there, dependencies name services that have the healthcheck or the one-shot exit
they wait for, one image is built once, and every command and healthcheck is a real `tensorwire` subcommand
whose options that subcommand accepts. tests/deploy/test_recipes.py runs the same commands as processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from tensorwire.cli import main as cli_main
from tensorwire.protocol.credentials import ADMIN_TOKEN_FILE, CLIENT_TOKEN_FILE
from tensorwire.protocol.hub.client import DEFAULT_PORT as HUB_PORT

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = YAML(typ="safe").load((ROOT / "compose.yaml").read_text())
SERVICES: dict = COMPOSE["services"]
#: the long-running services (the rest are one-shot init steps)
LONG = {n: s for n, s in SERVICES.items() if s.get("restart") != "no"}


def tensorwire_argv(svc: dict) -> list[str]:
    """The `tensorwire ...` arguments a service runs (after its entrypoint's `tensorwire`, if it has one)."""
    entry = svc.get("entrypoint") or ["tensorwire"]
    assert "tensorwire" in entry, f"entrypoint {entry} does not run tensorwire"
    return [*entry[entry.index("tensorwire") + 1 :], *svc["command"]]


def healthcheck_argv(svc: dict) -> list[str]:
    test = svc["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "tensorwire", test
    return test[2:]


def help_text(argv: list[str]) -> str:
    """What `tensorwire <subcommand words> --help` prints (in this process); fails if the subcommand is unknown."""
    words = [a for a in argv[: next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))]]
    if words[:1] == ["hub"]:  # `hub token create` has options of its own; `hub --root ...` is `hub serve`
        words = words[:3] if words[:2] == ["hub", "token"] else ["hub", "serve"]
    else:
        words = words[:1]
    out, err = io.StringIO(), io.StringIO()
    code = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main([*words, "--help"])
        except SystemExit as e:
            code = e.code
    assert code in (0, None), f"`tensorwire {' '.join(words)} --help` failed ({code}): {err.getvalue()}"
    return out.getvalue()


def test_compose_file_matches_the_compose_specification_schema():
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(COMPOSE), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_a_bad_file():
    """The validation above can fail: a misspelt key and a wrong type are both reported."""
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    bad = {"services": {"dispatcher": {"image": "x", "helthcheck": {}, "ports": "5555:5555"}}}
    assert len(list(jsonschema.Draft202012Validator(schema).iter_errors(bad))) >= 2


def test_every_service_of_the_design_is_there():
    kinds = {tensorwire_argv(s)[0] for s in LONG.values()}
    assert {"dispatcher", "worker", "autograd", "collectives", "hub"} <= kinds, kinds
    default_workers = [n for n, s in LONG.items() if tensorwire_argv(s)[0] == "worker" and not s.get("profiles")]
    assert len(default_workers) >= 2, "collectives need two workers"
    gpu = [s for s in LONG.values() if tensorwire_argv(s)[0] == "worker" and s.get("profiles")]
    assert gpu, "GPU workers are a profile"
    for s in gpu:
        if "rocm" in s["profiles"]:  # AMD GPUs: the ROCm kernel driver's device files (Docker's ROCm recipe)
            assert {"/dev/kfd", "/dev/dri"} <= set(s["devices"]) and "video" in s["group_add"]
            continue
        devices = s["deploy"]["resources"]["reservations"]["devices"]  # NVIDIA: a device reservation
        assert devices and all("gpu" in d["capabilities"] for d in devices)


def test_dependencies_name_services_that_can_satisfy_them():
    for name, svc in SERVICES.items():
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on without conditions"
        for dep, how in deps.items():
            assert dep in SERVICES, f"{name} depends on {dep}, which is not a service"
            cond = how["condition"]
            if cond == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"
            elif cond == "service_completed_successfully":
                assert SERVICES[dep].get("restart") == "no", f"{name} waits for {dep} to exit; it restarts"
            if SERVICES[dep].get("profiles"):
                assert set(svc.get("profiles") or []) >= set(SERVICES[dep]["profiles"]), f"{name} -> {dep}"
    for name, svc in LONG.items():
        assert "healthcheck" in svc, f"{name} has no healthcheck"
        assert svc.get("depends_on") or tensorwire_argv(svc)[0] == "dispatcher" or name == "hub", name


def test_one_image_built_once():
    """One image for the default deployment; an image of its own only where a profile needs another base (ROCm),
    built by a service that runs whenever the services using it do; each image built by one service."""
    builders: dict[str, str] = {}
    for n, s in SERVICES.items():
        if "build" in s:
            assert s["image"] not in builders, f"{s['image']} is built by {builders[s['image']]} and {n}"
            builders[s["image"]] = n
    default = {s["image"] for s in SERVICES.values() if not s.get("profiles")}
    assert len(default) == 1 and default <= set(builders), default
    for n, s in SERVICES.items():
        assert s["image"] in builders, f"{n} runs {s['image']}, which no service builds"
        builder = SERVICES[builders[s["image"]]]
        assert set(builder.get("profiles") or []) <= set(s.get("profiles") or []), f"{n}: its image's builder is off"
        if n != builders[s["image"]]:
            assert s.get("pull_policy") == "never", f"{n} would pull {s['image']}"


def test_commands_and_healthchecks_are_cli_subcommands_with_their_options():
    for name, svc in SERVICES.items():
        for argv in [tensorwire_argv(svc)] + ([healthcheck_argv(svc)] if "healthcheck" in svc else []):
            text = help_text(argv)
            for opt in (a for a in argv if a.startswith("--")):
                assert re.search(rf"(^|[\s\[]){re.escape(opt)}\b", text), f"{name}: `{' '.join(argv)}`: no {opt}"


def test_collectives_share_the_workers_shared_memory_with_one_rank_per_device():
    coll = next(s for s in LONG.values() if tensorwire_argv(s)[0] == "collectives")
    argv = tensorwire_argv(coll)
    devices = argv[argv.index("--devices") + 1].split(",")
    entry = coll["entrypoint"]
    assert entry[entry.index("-n") + 1] == str(len(devices))
    served = {
        tensorwire_argv(s)[tensorwire_argv(s).index("--device") + 1]: n
        for n, s in LONG.items()
        if tensorwire_argv(s)[0] == "worker"
    }
    assert set(devices) <= set(served), (devices, served)
    owners = [n for n, s in LONG.items() if s.get("ipc") == "shareable"]
    assert len(owners) == 1, owners
    for n in [*(served[d] for d in devices), *(x for x, s in LONG.items() if s is coll)]:
        if n != owners[0]:
            assert LONG[n].get("ipc") == f"service:{owners[0]}", f"{n} does not share {owners[0]}'s /dev/shm"


def test_credentials_are_made_inside_the_deployment_and_ports_are_the_documented_ones():
    init = {tensorwire_argv(s)[0]: tensorwire_argv(s) for n, s in SERVICES.items() if s.get("restart") == "no"}
    assert "--tokens" in init["keys"] and "--out" in init["hub"]
    disp = next(tensorwire_argv(s) for s in LONG.values() if tensorwire_argv(s)[0] == "dispatcher")
    keys = disp[disp.index("--keys") + 1]
    assert disp[disp.index("--token-file") + 1] == f"{keys}/{CLIENT_TOKEN_FILE}"
    assert disp[disp.index("--admin-token-file") + 1] == f"{keys}/{ADMIN_TOKEN_FILE}"
    hub = next(s for s in LONG.values() if tensorwire_argv(s)[0] == "hub")
    assert f"{HUB_PORT}:{HUB_PORT}" in hub["ports"]
    assert any(p.endswith(":5555") for p in next(s for s in LONG.values() if s is not hub and "ports" in s)["ports"])


def test_the_image_runs_as_a_non_root_user_and_leaves_secrets_out():
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", "*.token", "*.key_secret", "keys", "hubdata"} <= ignored


@pytest.mark.parametrize("key", ["image", "restart"])
def test_each_service_says_how_it_runs(key):
    assert all(key in s for s in SERVICES.values()), [n for n, s in SERVICES.items() if key not in s]


def test_long_running_services_have_an_init_that_reaps_children():
    """Issue 36, finding 9: a service is not PID 1 itself (PID 1 gets no default signal handlers and must reap
    every orphan): compose's ``init: true`` puts docker's init in front of each long-running one."""
    assert all(s.get("init") is True for s in LONG.values()), [n for n, s in LONG.items() if s.get("init") is not True]


def _dockerfile() -> tuple[dict[str, str], dict[str, str], str]:
    """The Dockerfile's global build arguments (before its first FROM) with their defaults, its stages (name -> the
    image each starts FROM) and the final stage's FROM."""
    args, stages, final = {}, {}, None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if m := re.match(r"ARG\s+(\w+)=(\S+)$", line):
            if not stages and final is None:
                args[m.group(1)] = m.group(2).strip('"')
        elif m := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?$", line):
            if m.group(2):
                stages[m.group(2)] = m.group(1)
            else:
                final = m.group(1)
    return args, stages, final


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def test_every_base_an_image_asks_for_is_a_stage_of_the_dockerfile():
    args, stages, final = _dockerfile()
    assert final is not None and "${BASE}" in final, final
    assert stages[_expand(final, args)] == "python:3.11-slim"  # the default build
    for n, s in SERVICES.items():
        if "build" in s:
            base = _expand(final, {**args, **s["build"].get("args", {})})
            assert base in stages, f"{n} builds on {base}, which the Dockerfile does not define"


def test_rocm_workers_run_on_rocms_image_of_the_release_hip_python_is_matched_to():
    """Issue 36, finding 9: hip-python loads libamdhip64, hipRTC and hipBLAS from a ROCm install, which
    python:3.11-slim lacks; the ROCm worker's image starts from AMD's ROCm image of the matching release."""
    pin = re.search(r'"hip-python==(\d+\.\d+)\.\*"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml's rocm extra pins hip-python==X.Y.*"
    args, stages, final = _dockerfile()
    assert args["ROCM_VERSION"] == pin.group(1), (args, pin.group(1))
    rocm = [(n, s) for n, s in LONG.items() if tensorwire_argv(s)[0] == "worker"
            and tensorwire_argv(s)[tensorwire_argv(s).index("--device") + 1].startswith("rocm:")]
    assert rocm, "a ROCm worker (the rocm profile)"
    for n, s in rocm:
        build_args = s["build"]["args"]  # it builds its own image, on the ROCm stage, with the rocm extra
        base = stages[_expand(final, {**args, **build_args})]
        assert re.fullmatch(r"rocm/dev-ubuntu-\d\d\.04:" + re.escape(pin.group(1)), _expand(base, args)), (n, base)
        assert "rocm" in build_args["EXTRAS"].strip("[]").split(","), (n, build_args)
        assert s.get("init") is True and {"/dev/kfd", "/dev/dri"} <= set(s["devices"]), n
    text = (ROOT / "Dockerfile").read_text()
    rocm_stage = text[text.index("AS base-rocm") : text.index("FROM base-${BASE}")]
    assert "hipblas" in rocm_stage and "venv" in rocm_stage, rocm_stage  # matmul's library; a Python to pip into
