"""Collectives coordination: one global order of collectives for every rank, released once every part is ready,
failed everywhere when one part fails. The data moves between the ranks (MPI) or devices (NCCL), never here."""

from __future__ import annotations

import logging

from tensorwire.protocol.errors import (
    ProtocolError,
    ServiceUnavailable,
    error_to_wire,
)
from tensorwire.protocol.shm_paths import check_shm_path

from .plans import Split
from .state import (
    MAX_FAILED_COLLECTIVES,
    ServiceInfo,
    Session,
    wire_error,
)

log = logging.getLogger("tensorwire.dispatcher")


class Collectives:
    """Announce, release and fail collectives."""

    def _check_collectives(self, split: Split, nodes, dyn_by_node: dict) -> list[tuple[int, list[str]]]:
        """Validate the batch's collectives (one key per collective, a rank serving every device); returns
        ``[(client key, devices in rank order)]`` for :meth:`_announce_collectives`. Changes nothing."""
        out = []
        for group in split.coll_groups:
            keys = set()
            for j in group:
                a = dyn_by_node.get(j) if nodes is None else None
                k = a.get("key") if a else split.coll_keys[j]
                if type(k) is not int:
                    raise ProtocolError("a collective's key must be an int")
                keys.add(k)
            if len(keys) != 1:
                raise ProtocolError("the parts of one collective must share one key")
            devs = [split.node_dev[j] for j in sorted(group, key=lambda j: split.coll_rank[j])]
            missing = [d for d in devs if d not in self.coll_ranks]
            if missing:
                raise ServiceUnavailable(f"the collectives service is not running for {', '.join(missing)} "
                                         f"(it runs under mpiexec: `mpiexec -n N tensorwire collectives ...`; "
                                         f"LocalCluster starts it for 2+ devices when mpi4py is installed)")
            out.append((keys.pop(), devs))
        return out

    def _announce_collectives(self, s: Session, colls: list[tuple[int, list[str]]]) -> dict:
        """Give each collective of the batch a global key and announce it, in order, to its ranks.

        Every rank hears of collectives in the dispatcher's one order, so all ranks run them in the
        same order whichever worker gets its input ready first. Returns ``{client key: global key}``.
        """
        mapping, direct = {}, []
        for key, devs in colls:
            gk = self.next_coll
            self.next_coll += 1
            mapping[key] = gk
            via = self._direct_transport(devs)
            self.coll_pending[gk] = {"all": set(devs), "devices": set(devs), "session": s.sid, "direct": via}
            if via:
                direct.append(gk)
            for d in devs:
                self._to_service(self.coll_ranks[d], {"t": "coll_announce", "key": gk, "devices": devs})
        return mapping, direct

    def _direct_transport(self, devs: list[str]) -> str | None:
        """The transport that moves a collective between device buffers directly (``"nccl"``): the one every
        device's worker registered (``info.collectives``) when every rank serving them has it too
        (``info.transports``); None: the workers stage their parts in shared memory for MPI."""
        names = set()
        for d in devs:
            w, rank = self.workers.get(d), self.coll_ranks.get(d)
            name = w.info.get("collectives") if w is not None else None
            have = rank.info.get("transports") if rank is not None else None
            if not isinstance(name, str) or not isinstance(have, list) or name not in have:
                return None
            names.add(name)
        return names.pop() if len(names) == 1 else None

    def _coll_ready(self, svc: ServiceInfo, h: dict, frames=()) -> None:
        """Release a collective's ranks once every worker's input is in shared memory. The file a worker names
        must be one of its own (``protocol/shm_paths.py``): a rank maps it read-write and writes the result in."""
        key = h.get("key")
        pend = self.coll_pending.get(key) if type(key) is int else None
        if pend is None and svc.kind == "worker" and type(key) is int:
            failed = self.coll_failed.get(key)
            if failed is not None and svc.name in failed[0]:  # it failed before this part started: say so now
                self._to_service(svc, {"t": "coll_done", "key": key, "err": failed[1]})
            return
        if pend is None or svc.kind != "worker" or svc.name not in pend["all"]:
            return
        if svc.name not in self.coll_ranks:
            self._coll_failed(key, f"no collectives rank serves {svc.name}")
            return
        if h.get("direct") is True:  # the input stays on the device: the transport (NCCL) moves it
            if not pend.get("direct"):
                self._coll_failed(key, f"the worker for {svc.name} asked for a device transport this collective "
                                       f"does not use")
                return
        else:
            try:
                check_shm_path(h.get("path"), svc.info.get("pid"), svc.name)
            except ProtocolError as e:
                log.warning("worker %s: %s", svc.name, e.message)
                self._coll_failed(key, f"the worker for {svc.name} named a file that is not its own shared memory")
                return
        # the rank learns the device and pid from the dispatcher's registration, not from the worker's message
        pend.setdefault("ready", {})[svc.name] = {**h, "device": svc.name, "pid": svc.info.get("pid")}
        if len(pend["ready"]) == len(pend["all"]):
            parts = list(pend["ready"].values())
            if len({(m.get("direct") is True, str(m.get("dtype")), str(m.get("shape"))) for m in parts}) != 1:
                del pend["ready"]  # no rank is released: they are told to skip it
                self._coll_failed(key, "", error_to_wire(ProtocolError(
                    "the parts of a collective disagree on dtype, shape or transport")))
                return
            if pend.get("direct"):  # communicators any part aborted: rank 0 makes the group a new id
                broken = sorted({b for m in parts if isinstance(m.get("broken"), list) for b in m["broken"][:64]
                                 if isinstance(b, str)})
                parts = [{**m, "broken": broken} for m in parts]
            # every part is ready: release the ranks together, so none spins in MPI waiting for a peer
            for msg in parts:
                self._to_service(self.coll_ranks[msg["device"]], msg)

    def _coll_abort(self, svc: ServiceInfo, h: dict, frames=()) -> None:
        """A worker's input to a collective failed: every part fails with that input's error (typed fields only),
        so no peer waits for a part that will never come."""
        key = h.get("key")
        pend = self.coll_pending.get(key) if type(key) is int else None
        if pend is None or svc.kind != "worker" or svc.name not in pend["all"]:
            return
        err = h.get("err")
        if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
            err = {k: err[k] for k in ("code", "message", "origin", "device") if k in err}
        else:
            err = None
        self._coll_failed(key, f"the input on {svc.name} failed", err)

    def _coll_failed(self, gk, why: str, err: dict | None = None) -> None:
        """Answer every worker still waiting on collective ``gk`` with an error (never leave one hanging):
        ``err`` when a part's input failed with it, else ``ServiceUnavailable`` saying ``why``."""
        pend = self.coll_pending.pop(gk, None)
        if pend is None:
            return
        err = err or error_to_wire(ServiceUnavailable(f"collective failed: {why}"))
        for dev in pend["devices"]:
            w = self.workers.get(dev)
            if w is not None:
                self._to_service(w, {"t": "coll_done", "key": gk, "err": err})
        if len(pend.get("ready", ())) < len(pend["all"]):  # no rank was released: they forget it and go on
            # a worker whose part has not started yet drops this coll_done (it knows no such part): its coll_ready
            # comes later and is answered with the error then (see _coll_ready)
            self.coll_failed[gk] = (set(pend["all"]) - set(pend.get("ready", ())), err)
            if len(self.coll_failed) > MAX_FAILED_COLLECTIVES:
                self.coll_failed.pop(next(iter(self.coll_failed)))
            for dev in pend["all"]:
                rank = self.coll_ranks.get(dev)
                if rank is not None:
                    self._to_service(rank, {"t": "coll_cancel", "key": gk})

    def _coll_done(self, svc: ServiceInfo, h: dict, frames) -> None:
        """A rank finished (or failed) its part: tell its worker."""
        key = h.get("key")
        dev = svc.info.get("device")
        if type(key) is not int or svc.kind != "collectives" or self.coll_ranks.get(dev) is not svc:
            return
        pending = self.coll_pending.get(key)
        w = self.workers.get(dev)
        err = h.get("err")
        if w is not None:
            msg = {"t": "coll_done", "key": key, **({"err": wire_error(err)} if err else {})}
            direct = h.get("direct")
            if not err and isinstance(direct, dict) and pending is not None and pending.get("direct"):
                # the group's communicator id for the worker (the worker checks it names its device)
                msg["direct"] = {k: direct.get(k) for k in ("uid", "rank", "devices")}
            self._to_service(w, msg)
        if pending is not None:
            pending["devices"].discard(dev)
            if not pending["devices"]:
                del self.coll_pending[key]
