"""``protocol.batch_ids``: a batch's output ids as one block, and its temporaries as node ranges."""

from __future__ import annotations

import pytest

from tensorwire.protocol.batch_ids import check_temps, kept_nodes, out_ids, temp_ranges
from tensorwire.protocol.errors import ProtocolError


def test_temp_ranges_merge_runs_of_indices():
    assert temp_ranges([]) == []
    assert temp_ranges([0, 1, 2, 5, 7, 8]) == [[0, 3], [5, 6], [7, 9]]
    assert temp_ranges(range(10_000)) == [[0, 10_000]]


@pytest.mark.parametrize("n, nodes", [(1, []), (5, [0, 4]), (9, [1, 2, 3, 6]), (4, [0, 1, 2, 3])])
def test_kept_nodes_is_the_complement_of_the_temporaries(n, nodes):
    temps = check_temps(temp_ranges(nodes), n)
    assert kept_nodes(n, temps) == [j for j in range(n) if j not in nodes]


@pytest.mark.parametrize("temps", [
    5, [[0]], [[0, 1, 2]], [["0", 1]], [[1, 1]], [[2, 1]], [[0, 4]], [[-1, 1]], [[1, 2], [0, 1]], [[0, 2], [1, 3]],
    [[0, True]], [[0, 1]] * 5,
])
def test_malformed_temporaries_are_protocol_errors(temps):
    with pytest.raises(ProtocolError):
        check_temps(temps, 3)


def test_output_ids_come_from_the_list_or_from_the_first_id():
    assert out_ids({"outs": [4, 9]}, 2) == [4, 9]
    assert out_ids({"out_first": 100}, 3) == range(100, 103)
    assert out_ids({"out_first": 100}, None) == []  # node count unknown: no ids
    for bad in ({"out_first": "1"}, {"out_first": 1.5}, {"out_first": 1, "outs": [1]}):
        with pytest.raises(ProtocolError):
            out_ids(bad, 1)
