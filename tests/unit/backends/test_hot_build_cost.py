"""What a kernel's build is expected to cost (backends/codegen/cache.py ``KernelCache.expected_seconds``): a hot plan
whose kernels are not cached waits until its runs have earned the build (backends/hot.py ``Earning``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tensorwire.backends import hot
from tensorwire.backends.codegen import cache as C


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_build_is_priced_by_its_source_at_the_rate_this_process_s_builds_took(tmp_path, monkeypatch):
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    kc = C.KernelCache("test", "v1")
    source = "x" * 10_000
    assert kc.expected_seconds(source) == pytest.approx(10_000 * C.BUILD_RATE)  # (nothing built yet: the guess)
    with C.cached_only(), pytest.raises(C.NotCached) as e:
        kc.get_or_build(source, ".src", ".bin", lambda src, out: Path(out).write_bytes(b"built"))
    assert e.value.seconds == pytest.approx(kc.expected_seconds(source))
    assert kc.builds == 0 and not list(tmp_path.rglob("*.bin"))  # (nothing built)

    def slow_build(src: str, out: str) -> None:  # a build of 10 KB taking 0.8 s of CPU: 80 us a byte
        _busy(0.8)
        Path(out).write_bytes(b"built")

    kc.get_or_build(source, ".src", ".bin", slow_build)
    assert kc.builds == 1 and kc.build_seconds >= 0.8 and kc.build_bytes == 10_000
    rate = (kc.build_seconds + C.BUILD_RATE * C.BUILD_RATE_WEIGHT) / (10_000 + C.BUILD_RATE_WEIGHT)
    assert kc.expected_seconds(source) == pytest.approx(10_000 * rate)
    assert kc.expected_seconds(source) > 10_000 * C.BUILD_RATE  # (slower than the guess: priced higher)
    with C.cached_only():  # cached now: no NotCached, nothing built
        kc.get_or_build(source, ".src", ".bin", slow_build)
    assert kc.builds == 1 and kc.hits == 1


def test_a_fragment_earns_its_build_once_its_runs_took_its_cost():
    known = hot.Structures()
    assert known.earning(7) is None and not known.any_measured
    earning = hot.Earning()
    assert not earning.earned()  # (not priced yet: its compile has not asked the kernel cache)
    earning.spent, earning.cost = 0.5, 1.0
    known.keep_earning(7, earning)
    assert known.earning(7) is earning and known.any_measured  # (a later plan of it must be looked up)
    assert not earning.earned()
    earning.spent += 0.5
    assert earning.earned()
    known.earned(7)
    assert known.earning(7) is None and not known.any_measured
