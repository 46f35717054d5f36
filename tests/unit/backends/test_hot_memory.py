"""What a device remembers of its hot plans' trials (backends/hot.py ``Structures``): by fragment, bounded, least
recently used forgotten first; a fragment measured slower is never compiled again, one taken or mid-trial compiles
after its first run."""

from __future__ import annotations

from tensorwire.backends import hot
from tensorwire.backends.cpu import CompiledBackend
from tensorwire.backends.executor import compile_plan
from tensorwire.protocol import dtypes as D


def test_the_trials_a_device_keeps_are_bounded_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(hot, "STRUCTURES_REMEMBERED", 3)
    known = hot.Structures()
    assert not known.any_measured and known.measured(1) is None
    first = known.measure(1)
    assert known.measure(1) is first and known.any_measured  # one a fragment
    first.times[0].append(0.5)
    known.measure(2), known.measure(3)
    assert known.measured(1) is first  # (used: now the most recent)
    known.measure(4)  # four: the least recently used (2) goes
    assert known.measured(2) is None and known.measured(1) is first and known.measured(3) is not None
    assert first.times == ([0.5], [])


def test_a_fragment_is_compiled_or_not_by_the_device_s_verdict_on_it():
    """A plan of a fragment the device measured slower is never compiled; one taken, or mid-trial, waits one run; an
    unmeasured fragment waits as it always did. Verdicts are by fragment: another shape is another fragment."""
    dev = CompiledBackend(min_work=1 << 20, hot_runs=50).open(0)
    chain = [["mul", [-1, -1], None], ["add", [0, -1], None], ["tanh", [1], None]]

    def plan_of(n: int):
        return compile_plan(dev, chain, [((n,), D.float32)])

    first = plan_of(16)
    assert first.tier is not None and first.tier.hot_runs == 50 and first.tier.measured is None
    known = hot.structures_of(dev)
    fragment = hot._keys(chain, [((16,), D.float32)], first.node_meta, None)[2]
    measured = known.measure(fragment)
    for verdict, hot_runs in ((None, 1), (True, 1)):
        measured.compiled = verdict
        tier = plan_of(16).tier
        assert tier.measured is measured and tier.hot_runs == hot_runs and tier.fragment == fragment
    assert not known.slower(fragment)
    measured.compiled = False
    assert known.slower(fragment) and plan_of(16).tier is None
    assert plan_of(24).tier.measured is None  # (another fragment)
