"""Progress at the client while workers download weights from the hub (``tw.hub.load_state_dict(progress=...)``).

A load that asks for progress gets an id from its session (:meth:`Session.watch_progress`), which travels in its
``hub_tensor`` ops; the workers report their downloads under it, the dispatcher passes the reports to this session
only, and the session hands each to the load's sink while it waits for an answer (``tensorwire.protocol.progress``
has the message). A sink is a callable taking a :class:`DownloadProgress`: the user's own, or :class:`Bars`, which
draws the hub CLI's bars (``tensorwire.protocol.hub.client.progress_bar``) on stderr.

When bars are drawn (:func:`bars_enabled`): ``progress=False`` never; ``TENSORWIRE_PROGRESS=0`` never, whatever the
code says (as ``HF_HUB_DISABLE_PROGRESS_BARS=1``); ``progress=True`` or ``TENSORWIRE_PROGRESS=1`` also when stderr is
not a terminal; otherwise (``progress=None``, the default) when stderr is a terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorwire.protocol.hub.client import progress_bar
from tensorwire.protocol.progress import ENV

_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class DownloadProgress:
    """One report of a worker's download: ``done`` of ``total`` bytes of ``file`` (``repo/path@commit``) into
    ``device``; ``end``: the download's last report (``done < total`` then means it failed)."""

    device: str
    file: str
    done: int
    total: int
    end: bool = False

    @property
    def fraction(self) -> float:
        """``done / total`` (1.0 for an empty file)."""
        return self.done / self.total if self.total else 1.0


ProgressSink = Callable[[DownloadProgress], Any]
#: what ``progress=`` takes: None (the default: bars on a terminal), a bool, or a callable taking each report
ProgressArg = bool | None | ProgressSink


def bars_enabled(progress: bool | None = None) -> bool:
    """Whether a load with ``progress`` (None, True or False) draws bars (see the module's doc)."""
    env = os.environ.get(ENV, "").strip().lower()
    if progress is False or env in _OFF:
        return False
    if progress is True or env in _ON:
        return True
    return sys.stderr is not None and sys.stderr.isatty()


def sink_for(progress: ProgressArg) -> ProgressSink | None:
    """The sink a load's reports go to: ``progress`` itself when it is a callable, bars when
    :func:`bars_enabled`, else None (the load asks for no reports)."""
    if callable(progress):
        return progress
    return Bars() if bars_enabled(progress) else None


class Bars:
    """Draws one bar per download (device, file) on stderr, closed at the download's last report."""

    def __init__(self) -> None:
        self.bars: dict[tuple[str, str], Any] = {}

    def __call__(self, p: DownloadProgress) -> None:
        key = (p.device, p.file)
        bar = self.bars.get(key)
        if bar is None:
            if p.end and p.done >= p.total and p.done == 0:
                return  # an empty file: nothing to draw
            name = p.file.rsplit("/", 1)[-1].rpartition("@")[0] or p.file
            bar = self.bars[key] = progress_bar(p.total, f"{name} -> {p.device}")
        if p.done > bar.n:
            bar.update(p.done - bar.n)
        if p.end:
            del self.bars[key]
            bar.close()

    def close(self) -> None:
        """Close every bar still open (their downloads never reported an end)."""
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()
