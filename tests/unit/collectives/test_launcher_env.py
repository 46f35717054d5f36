"""The collectives' MPI launcher as root: Open MPI's consent is given for our own job, and an operator's choice kept."""

from __future__ import annotations

import os

import pytest

from tensorwire.collectives import network as N

CONSENT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no user ids on this platform")
def test_root_gets_open_mpis_consent_and_others_nothing(monkeypatch):
    env = {"PATH": "/bin"}
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert N.launcher_env(env) == {**env, **CONSENT}
    assert env == {"PATH": "/bin"}  # (the caller's environment is not changed)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert N.launcher_env(env) is env


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no user ids on this platform")
def test_an_operators_own_setting_is_kept(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "0"}
    got = N.launcher_env(env)
    assert got["OMPI_ALLOW_RUN_AS_ROOT"] == "0" and got["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
