"""``tensorwire selftest``: its rows on cpu:0 (the speed rows too when PyTorch is installed), its failure on a device
that is not here, and (marked ``gpu``) the whole run on a real CUDA GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tensorwire.backends.cuda import CUDABackend

CHECKS = ["device", "conformance", "gradcheck", "training", "large batch", "matmul 4096", "two sessions", "all_reduce"]


def selftest(*args: str, timeout: float = 300) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "selftest", "--json", *args], capture_output=True,
                       text=True, timeout=timeout)
    assert r.stdout.strip(), f"selftest printed nothing (exit {r.returncode}):\n{r.stderr[-3000:]}"
    return r.returncode, json.loads(r.stdout)


def test_selftest_on_cpu0_passes_every_check():
    rc, out = selftest("--device", "cpu", "--no-speed")
    rows = {r["name"]: r for r in out["rows"]}
    assert out["device"] == "cpu:0" and list(rows) == CHECKS, rows
    assert rc == 0 and all(r["verdict"] == "ok" for r in rows.values()), rows
    assert "sum over cpu:0, cpu:1" in rows["all_reduce"]["detail"]


def test_selftest_fails_with_the_reason_on_a_device_that_is_not_here():
    rc, out = selftest("--device", "cpu:9999", "--no-speed")
    assert rc == 1 and [r["verdict"] for r in out["rows"]] == ["FAIL"], out
    assert "cpu:9999 does not exist" in out["rows"][0]["detail"]


def test_the_speed_rows_run_against_pytorch_on_the_same_device(session):
    """(On the run's shared cluster: the rows use cpu:0 only.)"""
    pytest.importorskip("torch")
    from tensorwire import selftest as S

    rows = [S.speed_matmul("cpu:0", n=256, repeat=2), S.speed_chain("cpu:0", n=1 << 16)]
    for r in rows:
        assert r.ours_ms > 0 and r.peer_ms > 0 and r.ratio > 0 and r.met is None, r  # no target on a CPU


REAL = CUDABackend().devices()[0]


@pytest.mark.gpu
@pytest.mark.skipif(not REAL.available, reason=f"no usable CUDA GPU here: {REAL.reason}")
def test_selftest_passes_on_a_gpu():
    rc, out = selftest("--device", "cuda:0", timeout=600)
    failed = [r for r in out["rows"] if r["verdict"] == "FAIL"]
    assert rc == 0 and not failed, failed
