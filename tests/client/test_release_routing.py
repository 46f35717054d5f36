"""``DataPlane.route_releases``: where each released handle goes (its device's channel when that device is in direct
mode, else the relay), and what the plane then forgets. A step's releases that all live on the one direct device
take a shortcut (set operations); each case here is routed both ways and must end in the same state."""

from __future__ import annotations

import pytest

from tensorwire.channels import DataPlane


def _plane(direct: set, loc: dict, made: set) -> DataPlane:
    p = DataPlane([{"device": d, "address": "tcp://127.0.0.1:1", "cap": b"c", "wid": "w" + d, "expires": 1e18}
                   for d in ("cpu:0", "cpu:1")], None)
    p.direct = set(direct)
    p.loc = dict(loc)
    p.direct_made = set(made)
    return p


def _state(p: DataPlane):
    return (p.loc, p.direct_made, p.forget, p.relay_releases, {d: ch.releases for d, ch in p.channels.items()})


CASES = [
    # all on the one direct device, some made on its channel (the shortcut)
    ({"cpu:0"}, {1: "cpu:0", 2: "cpu:0", 3: "cpu:0"}, {2}, [3, 1, 2]),
    # one of them lives elsewhere: the relay takes it, and keeps its loc
    ({"cpu:0"}, {1: "cpu:0", 2: "cpu:1", 3: "cpu:0"}, {1}, [1, 2, 3]),
    # a handle the plane never placed
    ({"cpu:0"}, {1: "cpu:0"}, set(), [1, 7]),
    # a handle released twice: the second release goes to the relay
    ({"cpu:0"}, {1: "cpu:0", 2: "cpu:0"}, {1, 2}, [1, 2, 1]),
    # two direct devices, and none
    ({"cpu:0", "cpu:1"}, {1: "cpu:0", 2: "cpu:1"}, {2}, [1, 2]),
    (set(), {1: "cpu:0"}, {1}, [1]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_routing_a_step_s_releases_at_once_ends_as_one_at_a_time_does(case):
    direct, loc, made, release = CASES[case]
    fast = _plane(direct, loc, made)
    fast.route_releases(list(release))
    slow = _plane(direct, loc, made)
    for i in release:  # (one release at a time: never the shortcut, which takes a whole step's only)
        slow.route_releases([i])
    assert _state(fast) == _state(slow)


def test_releases_on_the_direct_device_go_on_its_channel_and_the_dispatcher_forgets_those_it_knew():
    p = _plane({"cpu:0"}, {1: "cpu:0", 2: "cpu:0", 3: "cpu:0"}, {2})
    p.route_releases([3, 1, 2])
    assert p.channels["cpu:0"].releases == [3, 1, 2] and p.relay_releases == []
    assert p.forget == [3, 1] and p.direct_made == set() and p.loc == {}


@pytest.mark.parametrize("loc, release, want", [
    ({1: "cpu:0", 2: "cpu:0"}, [1, 2], "cpu:0"),  # all on one device: its channel
    ({1: "cpu:0", 2: "cpu:1"}, [1, 2], None),  # two devices: the relay
    ({1: "cpu:1"}, [1, 7], None),  # one the plane never placed: the relay
    ({}, [], None),  # nothing at all
])
def test_a_message_of_releases_alone_goes_to_the_device_they_live_on(loc, release, want):
    # (the flush before a service request: relayed, it took a direct device back to the relay for SWITCH_BACK
    # batches; the char-level transformer's cold run relayed 371 of its 575 batches so)
    p = _plane({"cpu:0"}, loc, set())
    assert p.direct_device("", [], [], release) == want


def test_a_message_with_inputs_or_nodes_is_placed_by_them_not_by_its_releases():
    p = _plane({"cpu:0"}, {1: "cpu:0", 2: "cpu:1"}, set())
    assert p.direct_device("", [1], [], [2]) == "cpu:0"
    assert p.direct_device("cpu:0", [], [], [2]) == "cpu:0"
    assert p.direct_device(None, [], [], [1]) is None  # (work only the relay does)
