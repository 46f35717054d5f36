"""Shared fixtures: real clusters started on free local ports, one per test module."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TENSORWIRE_START_TIMEOUT", "120")


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster with cpu:0 and cpu:1 for the whole test module."""
    import tensorwire as tw

    with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c:
        yield c


@pytest.fixture(scope="module")
def session(cluster):
    """A session on the module's cluster, the default one while the module runs."""
    import tensorwire as tw

    s = tw.connect(cluster.address)
    yield s
    s.close()
    tw.set_session(None)
