"""torch's process-wide settings (client/torch_settings.py), with no cluster: a cluster's thread counts and their
validation, the deterministic mode installs the session's check, which refuses the ``mps`` backend's atomic
scatter-adds, and the float32 matmul precision is ``tw.backends.cuda.matmul.allow_tf32``; each against torch where
torch answers. That the counts reach a real embedded cluster: tests/client/test_torch_namespace.py."""

from __future__ import annotations

import warnings

import pytest

import tensorwire as tw
from tensorwire import cluster as C
from tensorwire import context as ctx
from tensorwire import session as S
from tensorwire import torch_settings as T
from tensorwire.backends import torch_flags
from tensorwire.protocol.service import default_worker_threads


@pytest.fixture(autouse=True)
def _restore():
    """Every setting these tests change, as it was."""
    saved = (ctx.embedded_threads, ctx.embedded_exec_threads, T._deterministic, T._warn_only, T._reduced,
             torch_flags.cuda_matmul.allow_tf32, S.deterministic_check)
    yield
    (ctx.embedded_threads, ctx.embedded_exec_threads, T._deterministic, T._warn_only, T._reduced,
     torch_flags.cuda_matmul.allow_tf32, S.deterministic_check) = saved


def _raised(fn, *args):
    """(type, message) of what ``fn(*args)`` raises."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the point is which
        return type(e), str(e)
    return None


# -- threads ----------------------------------------------------------------------------------------------------------

def test_a_clusters_threads():
    c = object.__new__(C.LocalCluster)
    c.devices, c.worker_threads, c.env = ["cpu:0", "cpu:1"], None, {}
    assert c.threads == default_worker_threads(2) and c.exec_threads == 4
    c.worker_threads, c.env = 7, {"TENSORWIRE_EXEC_THREADS": "3"}
    assert c.threads == 7 and c.exec_threads == 3


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True, None])
def test_thread_counts_are_validated_as_torchs(n):
    torch = pytest.importorskip("torch")
    for name in ("set_num_threads", "set_num_interop_threads"):
        ours = _raised(getattr(tw, name), n)
        ref = _raised(getattr(torch, name), n)
        assert ours is not None and ours == ref, (name, ours, ref)


def test_interop_threads_are_set_once_as_torchs(monkeypatch):
    # (a process with no embedded cluster yet: another test of this xdist worker may have started one, which refuses
    # every call, the rule's other half)
    monkeypatch.setattr(T, "_embedded_cluster", lambda: None)
    monkeypatch.setattr(ctx, "embedded_exec_threads", None)
    tw.set_num_interop_threads(2)
    with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
        tw.set_num_interop_threads(3)
    assert tw.get_num_interop_threads() == 2


# -- deterministic algorithms ------------------------------------------------------------------------------------------

def test_deterministic_flags_and_debug_modes_are_torchs():
    torch = pytest.importorskip("torch")
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        for mode in ("warn", "error", 0, 1, 2, True, "default"):
            tw.set_deterministic_debug_mode(mode)
            torch.set_deterministic_debug_mode(mode)
            assert tw.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode()
            assert tw.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled()
            assert (tw.is_deterministic_algorithms_warn_only_enabled()
                    == torch.is_deterministic_algorithms_warn_only_enabled())
        for args, kw in (((True,), {"warn_only": True}), ((True,), {}), ((False,), {})):
            tw.use_deterministic_algorithms(*args, **kw)
            torch.use_deterministic_algorithms(*args, **kw)
            assert tw.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode()
        for bad in (3, "foo", 1.0, None):
            assert _raised(tw.set_deterministic_debug_mode, bad)[0] is _raised(torch.set_deterministic_debug_mode,
                                                                               bad)[0]
        for bad in (1, "x", None):
            assert _raised(tw.use_deterministic_algorithms, bad)[0] is TypeError
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


def test_the_mode_refuses_the_mps_backends_atomic_scatter_adds_only():
    assert S.deterministic_check is None  # off: nothing to check, one lookup an op
    tw.use_deterministic_algorithms(True)
    check = S.deterministic_check
    assert check is not None
    with pytest.raises(RuntimeError, match="scatter_add on mps:0 does not have a deterministic implementation"):
        check("scatter_add", {"dim": 0}, "mps:0", tw.float32)
    with pytest.raises(RuntimeError, match=r"index_put\(accumulate=True\) on mps:0"):
        check("index_put", {"dim": 0, "accumulate": True}, "mps:0", tw.float16)
    check("index_put", {"dim": 0, "accumulate": False}, "mps:0", tw.float32)  # a plain write: one value a target
    check("scatter_add", {"dim": 0}, "mps:0", tw.int64)  # integer adds are exact in any order
    for dev in ("cpu:0", "cuda:0", "rocm:0", "opencl:0"):  # deterministic kernels: no atomics
        check("scatter_add", {"dim": 0}, dev, tw.float32)
        check("index_put", {"dim": 0, "accumulate": True}, dev, tw.float32)
    tw.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        S.deterministic_check("scatter_add", {"dim": 1}, "mps:0", tw.float32)
    assert len(got) == 1 and "deterministic implementation" in str(got[0].message)
    tw.use_deterministic_algorithms(False)
    assert S.deterministic_check is None


# -- float32 matmul precision ------------------------------------------------------------------------------------------

def test_matmul_precision_is_the_tf32_flag_as_in_torch():
    torch = pytest.importorskip("torch")
    saved = torch.get_float32_matmul_precision()
    try:
        for p in ("high", "medium", "highest", "high"):
            tw.set_float32_matmul_precision(p)
            torch.set_float32_matmul_precision(p)
            assert tw.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == p
            assert tw.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
        tw.set_float32_matmul_precision("highest")
        torch.set_float32_matmul_precision("highest")
        tw.backends.cuda.matmul.allow_tf32 = True  # the flag set directly: one setting
        torch.backends.cuda.matmul.allow_tf32 = True
        assert tw.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "high"
        tw.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        assert tw.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(saved)


def test_an_unknown_precision_warns_and_changes_nothing_as_torchs():
    tw.set_float32_matmul_precision("medium")
    with pytest.warns(UserWarning, match="is not one of 'highest', 'high', or 'medium'"):
        tw.set_float32_matmul_precision("HIGH")
    assert tw.get_float32_matmul_precision() == "medium"
    with pytest.raises(RuntimeError, match="expects a str, but got int"):
        tw.set_float32_matmul_precision(1)
