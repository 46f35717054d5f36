"""A cluster with the dashboard, shared by this folder's modules (they add no service they do not stop, kill nothing
and close their sessions: one start and stop instead of one per module), and two client sessions on it for each
module."""

from __future__ import annotations

import pytest

from tests._processes import wait_for  # noqa: F401  (the dashboard tests import it from here)

TOKEN = "dashboard-test-client-token"


@pytest.fixture(scope="package")
def dash_cluster(tmp_path_factory):
    """cpu:0 and cpu:1 with a client token (session links are keyed with it), a hub serving metrics (its downloads)
    and the dashboard on loopback; one for the folder's modules."""
    pytest.importorskip("starlette", reason="the dashboard needs Starlette: pip install 'tensorwire[dashboard]'")
    pytest.importorskip("uvicorn", reason="the dashboard needs uvicorn: pip install 'tensorwire[dashboard]'")
    import tensorwire as tw

    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], token=TOKEN, dashboard=True, autograd=False,
                         collectives=False, hub_root=tmp_path_factory.mktemp("hub"), metrics=True) as c:
        yield c


@pytest.fixture(scope="module")
def two_sessions(dash_cluster):
    """Sessions A and B of one cluster (each with the client token)."""
    import tensorwire as tw

    a, b = tw.Session(dash_cluster.address, TOKEN), tw.Session(dash_cluster.address, TOKEN)
    yield a, b
    a.close()
    b.close()


def run_batches(session, devices, n: int = 1) -> None:
    """``n`` small matmuls answered on each of ``devices`` in ``session`` (each ``item()`` is one batch)."""
    import tensorwire as tw

    with tw.use_session(session):
        for _ in range(n):
            for d in devices:
                x = tw.ones(48, 48, device=d)
                assert float((x @ x).sum().item()) == 48.0 ** 3


