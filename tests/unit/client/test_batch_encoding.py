"""A pending batch's wire form (``session.encode_batch``) and the nodes a batch leaves out (``session.prune_dead``),
on hand-made pending entries (``(id, op, input ids, attrs, device, line, input metas, attrs key)``, what
``Session.record`` appends); no cluster."""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.graph import attrs_key, structure_key
from tensorwire.session import encode_batch, prune_dead

F = D.float32
M = ((2, 3), F)  # (every value here: a float32 [2, 3])


def entry(hid, op, ins, attrs=None, dev="cpu:0", line=("prog.py", 1)):
    return (hid, op, tuple(ins), attrs, dev, line, [M] * len(ins), attrs_key(op, attrs))


def test_refs_name_earlier_nodes_and_external_inputs_once_each():
    sl = {"starts": [0, 0], "stops": [2, 3], "steps": [1, 1]}
    pending = [entry(10, "add", [1, 2]), entry(11, "mul", [10, 1]), entry(12, "slice", [11], sl, dev="cpu:1"),
               entry(13, "neg", [3], line=None)]
    where: dict = {}
    b = encode_batch(pending, where)
    assert b.ext == [1, 2, 3] and b.ext_meta == [M, M, M]
    assert b.outs == [10, 11, 12, 13]
    assert b.devs == ["cpu:0", "cpu:1"]
    assert b.nodes == [["add", [-1, -2], None, 0], ["mul", [0, -1], None, 0], ["slice", [1], sl, 1],
                       ["neg", [-3], None, 0]]
    assert b.dyn == [[2, {"starts": [0, 0], "stops": [2, 3]}]]  # (a slice's bounds: its dynamic attrs)
    keys = tuple(structure_key(op, tuple(refs), attrs_key(op, attrs), d) for op, refs, attrs, d in b.nodes)
    assert b.skey == (keys, ("cpu:0", "cpu:1"), (M, M, M))
    assert where == {10: ("prog.py", 1), 11: ("prog.py", 1), 12: ("prog.py", 1)}  # (no line: not kept)


def test_the_same_structure_gets_the_same_key_whatever_the_ids_and_bounds():
    def batch(base, start):
        sl = {"starts": [start, 0], "stops": [start + 1, 3], "steps": [1, 1]}
        return encode_batch([entry(base, "add", [7, 8]), entry(base + 1, "slice", [base], sl)])

    a, b = batch(100, 0), batch(200, 1)
    assert a.skey == b.skey
    assert a.dyn != b.dyn


def test_an_external_input_read_twice_by_one_node_is_one_input():
    b = encode_batch([entry(10, "mul", [1, 1]), entry(11, "add", [10, 2]), entry(12, "mul", [2, 11]),
                      entry(13, "add", [3, 1])])
    assert b.ext == [1, 2, 3] and b.ext_meta == [M, M, M]
    assert [n[1] for n in b.nodes] == [[-1, -1], [0, -2], [-2, 1], [-3, -1]]


def test_an_empty_batch_has_no_key():
    assert encode_batch([]).skey is None


def test_released_movement_and_known_nodes_nobody_reads_are_left_out():
    pending = [entry(1, "matmul", [0, 0]), entry(2, "reshape", [1], {"shape": [3, 2]}),
               entry(3, "permute", [2], {"dims": [1, 0]}), entry(4, "exp", [1])]
    kept, release = prune_dead(pending, [2, 3, 9])
    assert [e[0] for e in kept] == [1, 4]  # (the reshape was read only by the permute, which went too)
    assert release == [9]


def test_released_nodes_still_read_or_that_can_fail_are_kept():
    pending = [entry(1, "reshape", [0], {"shape": [3, 2]}), entry(2, "exp", [1]), entry(3, "matmul", [0, 0])]
    kept, release = prune_dead(pending, [1, 2, 3])
    assert kept is pending and release == [1, 2, 3]  # (exp and matmul are not prunable; exp reads the reshape)


def test_nothing_released_in_the_batch_keeps_it_whole():
    pending = [entry(1, "reshape", [0], {"shape": [3, 2]})]
    kept, release = prune_dead(pending, [5])
    assert kept is pending and release == [5]


def _upload(hid, shape, value):
    import numpy as np

    arr = np.full(shape, value, np.float32)
    return (hid, "const", [], {"shape": list(shape), "dtype": "float32", "frame": arr}, "cpu:0", None, (), None)


def test_a_structure_seen_before_is_encoded_as_the_full_encoding_without_its_nodes():
    from tensorwire.session import encode_known

    def batch(base, start, shape=(2, 3)):
        sl = {"starts": [start, 0], "stops": [start + 1, 3], "steps": [1, 1]}
        return [_upload(base, shape, start), entry(base + 1, "add", [base, 7]),
                entry(base + 2, "slice", [base + 1], sl), entry(base + 3, "mul", [base + 2, 7]),
                entry(base + 4, "add", [base + 3, 8])]

    for pending, seen in ((batch(100, 0), False), (batch(200, 1), True), (batch(300, 1, (3, 2)), False)):
        full, b = encode_batch(pending), encode_known(pending)
        assert (b.nodes is None) == seen
        assert b.skey == full.skey and b.devs == full.devs and b.outs == full.outs
        assert b.ext == full.ext and b.ext_meta == full.ext_meta and b.dyn == full.dyn
        assert [bytes(f) for f in b.frames] == [bytes(f) for f in full.frames]


def test_a_structure_seen_before_with_other_input_metas_is_encoded_again():
    from tensorwire.session import encode_known

    other = ((4,), F)
    first = [entry(500, "add", [1, 2]), entry(501, "neg", [500])]
    encode_known(first)
    pending = [(600, "add", (3, 4), None, "cpu:0", None, [other, other], None), entry(601, "neg", [600])]
    b = encode_known(pending)
    assert b.nodes is not None and b.ext_meta == [other, other] == list(encode_batch(pending).skey[2])


def test_a_batch_of_the_same_ops_wired_otherwise_is_not_taken_for_a_structure_seen_before():
    # (encode_known checks a batch against the structures of its ops by their refs: each input must be the output or
    # the external input the structure names, and the external inputs distinct handles no node of the batch makes)
    from tensorwire.session import encode_known

    def check(pending, seen):
        full, b = encode_batch(pending), encode_known(pending)
        assert (b.nodes is None) == seen
        assert b.skey == full.skey and b.ext == full.ext and b.outs == full.outs and b.ext_meta == full.ext_meta
        assert b.device == "cpu:0"

    def batch(base, a, b, c):  # (a mul of two inputs, then an add of the mul's output and a third)
        return [entry(base, "mul", [a, b]), entry(base + 1, "add", [base if c is None else c, a])]

    check(batch(900, 1, 2, None), False)
    check(batch(910, 3, 4, None), True)  # (the same wiring, other handles)
    check(batch(920, 5, 5, None), False)  # (one external read twice: not two)
    check(batch(930, 6, 7, 8), False)  # (the add reads a third external, not the mul)
    check(batch(940, 6, 7, 940), True)  # (the add reads the mul's output again, by its handle)
    check(batch(950, 9, 10, 951), False)  # (a handle the batch makes later, read as if external)


def test_a_known_structure_says_whether_prune_dead_would_leave_a_node_out():
    # (the session's flush asks the structure first, from its unread nodes of a prunable op, and calls prune_dead only
    # when one of them is released: both must agree on every release)
    from tensorwire.session import encode_known, find_known, may_prune

    def batch(base):  # a matmul read by a reshape (read by a permute nobody reads) and by an exp nobody reads
        return [entry(base, "matmul", [1, 1]), entry(base + 1, "reshape", [base], {"shape": [3, 2]}),
                entry(base + 2, "permute", [base + 1], {"dims": [1, 0]}), entry(base + 3, "exp", [base])]

    assert find_known(batch(1000)) is None  # (never seen: nothing derived, nothing remembered)
    assert find_known(batch(1000)) is None
    encode_known(batch(1000))
    pending = batch(1100)
    b = find_known(pending)
    assert b is not None and b.nodes is None and b.outs == [1100, 1101, 1102, 1103]
    for gone in ({1102}, {1101, 1102}, {1101}, {1100, 1103}, {1103, 7}, {1100, 1101, 1102, 1103}, set()):
        kept, _ = prune_dead(pending, sorted(gone), gone)
        assert may_prune(b, gone) == (kept is not pending), gone


def test_variadic_nodes_reading_the_same_handles_split_otherwise_are_not_a_structure_seen_before():
    # (find_known compares the input counts of the nodes whose op does not fix them, a cat's: two cats reading 1, 2, 3
    # as [1, 2] + [3] or as [1] + [2, 3] read the same handles in the same order, and are two structures)
    from tensorwire.session import encode_known, find_known

    def batch(base, split):
        ins = [base - 3, base - 2, base - 1]
        return [entry(base, "cat", ins[:split], {"dim": 0}), entry(base + 1, "cat", ins[split:], {"dim": 0})]

    encode_known(batch(2003, 2))
    assert find_known(batch(2103, 2)) is not None  # (the same split, other handles)
    assert find_known(batch(2203, 1)) is None
    b = encode_known(batch(2303, 1))
    assert b.nodes is not None and [n[1] for n in b.nodes] == [[-1], [-2, -3]]
    assert find_known(batch(2403, 1)) is not None and find_known(batch(2503, 2)) is not None


def test_a_known_structure_s_uploads_travel_as_the_same_bytes_as_a_new_one_s():
    # (a structure seen before makes its uploads' frames from the attrs as a new batch makes them from its nodes: the
    # same bytes for every dtype, bfloat16 and complex included, and an empty upload as an empty frame)
    import numpy as np

    from tensorwire.session import encode_batch, encode_known, find_known

    def batch(base, arrays):
        return [(base + k, "const", (), {"shape": list(a.shape), "dtype": D.from_numpy(a.dtype).name, "frame": a},
                 "cpu:0", None, [], None) for k, a in enumerate(arrays)]

    def arrays(seed):
        r = np.random.default_rng(seed)
        return [r.standard_normal((2, 3)).astype(np.float32), np.array(seed, np.int64), np.zeros((0, 4), np.float32),
                r.standard_normal(3).astype(D.bfloat16.np), (r.standard_normal(2) + 1j).astype(np.complex64),
                np.array([True, False])]

    encode_known(batch(3000, arrays(0)))
    pending = batch(3100, arrays(1))
    b = find_known(pending)
    assert b is not None and b.nodes is None
    want = encode_batch(pending).frames
    assert [bytes(f) for f in b.frames] == [bytes(f) for f in want] and bytes(want[1]) == np.int64(1).tobytes()
    assert [len(bytes(f)) for f in b.frames] == [24, 8, 0, 6, 16, 2]
