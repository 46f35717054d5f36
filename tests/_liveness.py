"""Liveness settings for the test clusters that wait for a service to be found lost."""

from __future__ import annotations

from tensorwire.protocol.service import HEARTBEAT_ENV, HEARTBEAT_S, LIVENESS

#: the heartbeat period of a cluster whose tests wait for a lost service (a killed or stopped worker, autograd
#: service or MPI rank, a dispatcher gone, a worker that cannot register): half the default, so the dispatcher
#: declares a silent service dead after 2.5 s instead of 5, a worker finds its dispatcher gone as soon, and the
#: ``LocalCluster`` that starts it judges a worker's heartbeat file on the same period. Still 10 beats: a loaded
#: 2-core machine delays a heartbeat thread by far less than 2.5 s.
FAST_HEARTBEAT_S = HEARTBEAT_S / 2
#: for ``LocalCluster(extra_env=...)`` or a service process's environment
FAST_HEARTBEAT = {HEARTBEAT_ENV: f"{FAST_HEARTBEAT_S:g}"}
#: after this long without a heartbeat such a cluster's dispatcher declares a service dead
FAST_DEAD_AFTER_S = FAST_HEARTBEAT_S * LIVENESS
