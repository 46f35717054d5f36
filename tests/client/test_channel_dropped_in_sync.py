"""A device's channel dropped while the session syncs the relay before going direct on it (the sync's wait heard
that its worker is gone: ``Session._workers_lost``, a closed lane): the batch that was about to go direct goes
through the relay instead, and nothing is left pointing at the dropped channel (the random-fault soak test hit a
``KeyError`` in ``DataPlane.route_releases`` when the device was put back in direct mode without its channel)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.channels import SWITCH_BACK

from ._calls import device_value


@pytest.fixture
def two_device_session(cluster):
    if "cpu:1" not in cluster.devices:
        pytest.skip("needs the shared cluster's cpu:1")
    with tw.Session(cluster.address) as s, tw.use_session(s):
        yield s


def test_a_channel_dropped_during_the_relay_sync_sends_the_batch_through_the_relay(two_device_session):
    s = two_device_session
    x1 = tw.tensor(np.arange(4, dtype=np.float32), device="cpu:1")
    assert float((x1 * 2).sum().item()) == 12.0  # (direct)
    x0 = device_value(tw.ones(4, device="cpu:0"))  # (a value cpu:0 has: its move is a batch of two devices)
    assert float((x0.to("cpu:1") + x1).sum().item()) == 10.0  # (two devices: the relay takes cpu:1 back)
    assert "cpu:1" not in s._plane.direct and s._plane.relay_unsynced
    sync = s._relay_sync
    dropped = []

    def sync_then_lose_the_channel():
        sync()
        if not dropped:  # (as a lost worker's notice read during the sync's wait drops it)
            dropped.append(True)
            s._drop_channel("cpu:1", "dropped by the test during the relay's sync")

    s._relay_sync = sync_then_lose_the_channel
    for k in range(SWITCH_BACK + 3):  # (the device goes direct again after its cooldown: the sync comes then)
        tmp = x1 + k  # (a handle released in the next batch: routed by route_releases)
        del tmp
        assert float((x1 * 3).sum().item()) == 18.0
    assert dropped and "cpu:1" not in s._plane.channels and "cpu:1" not in s._plane.direct
