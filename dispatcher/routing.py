"""Batch routing (the relay): validating a batch against the session's handles, splitting it by device, sending
each worker its fragment, and gathering the workers' answers into the client's."""

from __future__ import annotations

import logging
import time

from tensorwire.protocol.batch_ids import check_temps, is_int_list, kept_nodes, out_ids
from tensorwire.protocol.errors import (
    NotFound,
    ProtocolError,
    TensorwireError,
    WorkerLost,
    error_to_wire,
)
from tensorwire.protocol.progress import check as check_progress

from .liveness import MAX_FETCH_ERRORS, RESTARTED_INFO
from .plans import RawPlan, Split, split_batch
from .state import (
    MAX_PLANS,
    MAX_SPANS,
    Pending,
    ServiceInfo,
    Session,
    device_ids,
    input_failed,
    reachable,
    wire_error,
)

log = logging.getLogger("tensorwire.dispatcher")


class Routing:
    """The relay's batches, their plans and answers."""

    def _worker_done(self, svc: ServiceInfo, h: dict, frames) -> None:
        sid, q = h.get("s"), h.get("q")
        s = self.sessions.get(sid) if type(sid) is bytes else None
        p = s.pending.get(q) if s is not None and (q is None or type(q) is int) else None
        if p is None or svc.name not in p.expect:
            return
        values, errors, fetch_errors = h.get("values") or [], h.get("errors") or [], h.get("fetch_errors") or []
        if not (isinstance(values, list) and isinstance(errors, list) and isinstance(fetch_errors, list)
                and all(isinstance(v, list) and len(v) == 4 and type(v[3]) is int and 0 <= v[3] < len(frames)
                        for v in values)):
            log.warning("worker %s sent a malformed result", svc.name)
            values, frames, fetch_errors = [], [], []
            errors = [ProtocolError(f"the worker for {svc.name} sent a malformed result").to_wire()]
        base = len(p.frames)
        for v in values:
            p.values.append([v[0], v[1], v[2], v[3] + base])
        p.frames.extend(frames)
        if frames:
            self.telemetry.device(svc.name).bytes_out += sum(map(len, frames))
        p.errors.extend(map(wire_error, errors))
        for e in errors:
            self.telemetry.error(e)
        p.fetch_errors.extend(wire_error(e, keep=("fetched", "node", "origin")) for e in fetch_errors)
        p.expect.discard(svc.name)
        self._maybe_reply(s, q)

    def _maybe_reply(self, s: Session, q) -> None:
        p = s.pending.get(q)
        if p is None or p.expect:
            return
        del s.pending[q]
        self._to_client(s.ident, {"t": "result", "q": q, "values": p.values, "errors": p.errors,
                                "fetch_errors": p.fetch_errors}, p.frames)
        if p.prof is not None:
            t0 = p.prof[1]
            self._span(s, ("dispatcher::batch", "dispatcher", t0, time.monotonic_ns() - t0, {"batch": p.prof[0]}))

    def _resend_plan(self, svc: ServiceInfo, h: dict, frames=()) -> None:
        s = self.sessions.get(h.get("s"))
        split = s.plans.get(h.get("plan")) if s is not None and isinstance(h.get("plan"), int) else None
        frags = getattr(split, "frags", None)  # (a plan kept unsplit has none yet: the client sends it again)
        frag = frags.get(svc.name) if frags is not None else None
        reply = {"t": "plan", "s": h.get("s"), "plan": h.get("plan")}
        if frag is None:
            reply["err"] = error_to_wire(NotFound(f"plan {h.get('plan')} is not known to the dispatcher"))
        else:
            reply["nodes"] = frag.nodes
        self._to_service(svc, reply)

    def _fail_batch(self, s: Session, outs, err: dict) -> None:
        """A batch failed validation: its outputs fail (later batches reading them fail with DependencyFailed)
        and the error is reported at the next sync point. Live handles are never touched."""
        if is_int_list(outs):  # (only a batch's kept outputs: its temporaries have no handles)
            for i in outs:
                if i not in s.handles:
                    s.failed[i] = err
        s.errors.append(err)
        self.telemetry.error(err)

    def _batch(self, s: Session, h: dict, frames) -> None:
        q = h.get("q")
        prof = h.get("prof")  # the profiler is on: the batch's number in the client's profile
        t0 = time.monotonic_ns() if prof is not None else 0
        try:
            self._run_batch(s, h, frames, t0)
        except TensorwireError as e:
            err = e.to_wire()
            self._fail_batch(s, self._kept_outs(s, h), err)
            if h.get("sync") or h.get("fetch"):
                fetch = h.get("fetch")
                fe = [{**err, "fetched": i} for i in fetch] if is_int_list(fetch) else []
                errs, s.errors = s.errors, []
                self._to_client(s.ident, {"t": "result", "q": q, "values": [], "errors": errs, "fetch_errors": fe})
        if type(prof) is int:
            self._span(s, ("dispatcher::route", "dispatcher", t0, time.monotonic_ns() - t0,
                           {"batch": prof, "nodes": len(self._outs(s, h)), "replay": h.get("nodes") is None}))

    @staticmethod
    def _outs(s: Session, h: dict):
        """The batch's output ids (see ``protocol.batch_ids``), or [] where they cannot be known (a malformed batch,
        or a replay of a plan the dispatcher does not have)."""
        n = None
        if "out_first" in h:
            nodes, plan = h.get("nodes"), s.plans.get(h.get("plan")) if type(h.get("plan")) is int else None
            if type(nodes) is list:
                n = len(nodes)
            elif isinstance(plan, Split):
                n = plan.n_nodes
            elif isinstance(plan, RawPlan):
                n = len(plan.nodes)
        try:
            outs = out_ids(h, n)
        except ProtocolError:
            return []
        return outs if type(outs) is range or is_int_list(outs) else []

    def _kept_outs(self, s: Session, h: dict) -> object:
        """The output ids of a batch that are not its temporaries (what a failed batch marks failed)."""
        if "out_first" not in h and "temps" not in h:
            return h.get("outs")  # (checked by _fail_batch: a flood of ids is gone through once)
        outs = self._outs(s, h)
        try:
            temps = check_temps(h.get("temps"), len(outs))
        except ProtocolError:
            temps = []
        return [outs[j] for j in kept_nodes(len(outs), temps)] if temps else list(outs)

    def _span(self, s: Session, span: tuple) -> None:
        """Keep a profiler span for the session's client to collect (at most MAX_SPANS; the rest are counted)."""
        if s.spans is None:
            s.spans = []
        if len(s.spans) < MAX_SPANS:
            s.spans.append(span)
        else:
            s.spans_dropped += 1

    @staticmethod
    def _keep_raw_plan(s: Session, plan_no, nodes, devs) -> None:
        """A well-formed batch that cannot run now: the client replays its structure by number from now on, so
        keep it, to be split again when it next runs (on the devices then serving)."""
        if plan_no is None:
            return
        if len(s.plans) >= MAX_PLANS:
            s.plans.pop(next(iter(s.plans)))
        s.plans[plan_no] = RawPlan(nodes, devs)

    def _run_batch(self, s: Session, h: dict, frames, t0: int = 0) -> None:
        q = h.get("q")
        prof = h.get("prof")
        if prof is not None and type(prof) is not int:
            raise ProtocolError("'prof' must be an int (the batch's number in the client's profile)")
        ext = h.get("ext") or []
        outs = h.get("outs") or []  # (or the block from out_first, known once the plan is: see protocol.batch_ids)
        fetch = h.get("fetch") or []
        release = h.get("release") or []
        plan_no = h.get("plan")
        drop_plans = h.get("drop_plans") or []
        for name, lst in (("ext", ext), ("outs", outs), ("fetch", fetch), ("release", release),
                          ("drop_plans", drop_plans)):
            if not is_int_list(lst):
                raise ProtocolError(f"batch '{name}' must be a list of ints")
        if plan_no is not None and type(plan_no) is not int:
            raise ProtocolError("'plan' must be an int")
        # (validation first, then the commit below: a batch that fails changes nothing but its outputs' errors)
        # every external input must be a live handle of this session
        handles = s.handles
        if h.get("lost"):
            self._lost_handles(s, h["lost"])
        locs = self._locs(s, h.get("locs"))
        ext_dev = [handles.get(i) or locs.get(i) for i in ext]
        failed_ext = {}
        if None in ext_dev:
            for k, i in enumerate(ext):
                if ext_dev[k] is None:
                    if i not in s.failed:
                        raise NotFound(f"handle {i} does not exist in this session (released, never created, "
                                       f"or another session's)")
                    failed_ext[k] = s.failed[i]
        nodes = h.get("nodes")
        if nodes is not None:
            self.telemetry.plan_misses += 1
            if failed_ext:  # before the split, which places nodes by their inputs' devices (a lost one has none,
                # and its device may have no worker now): the batch fails with its input, split at its next use
                self._keep_raw_plan(s, plan_no, nodes, h.get("devs") or [])
                raise self._input_failed(ext, failed_ext)
            try:
                split = split_batch(nodes, h.get("devs") or [], ext_dev, self.workers)
            except ProtocolError:
                raise  # malformed: nothing is kept
            except TensorwireError:  # well formed, not runnable now (a device has no worker): keep the plan
                self._keep_raw_plan(s, plan_no, nodes, h.get("devs") or [])
                raise
        elif plan_no is not None:
            self.telemetry.plan_hits += 1
            split = s.plans.get(plan_no) if plan_no not in drop_plans else None
            if split is None:
                raise NotFound(f"plan {plan_no} is not known to the dispatcher (send the full batch)")
            if isinstance(split, RawPlan):
                if failed_ext:
                    raise self._input_failed(ext, failed_ext)
                split = s.plans[plan_no] = split_batch(split.nodes, split.devs, ext_dev, self.workers)
            if ext_dev != split.ext_dev:
                for k, d in enumerate(ext_dev):
                    if d is not None and d != split.ext_dev[k]:
                        raise ProtocolError(f"plan {plan_no} replayed with input {ext[k]} on {d}, "
                                            f"expected {split.ext_dev[k]}")
        else:
            split = Split({}, [], [], 0, [], 0)
        out_first = h.get("out_first")
        if out_first is not None:
            outs = out_ids(h, split.n_nodes)
        if len(outs) != split.n_nodes or len(ext) != len(split.ext_dev):
            raise ProtocolError(f"batch has {split.n_nodes} nodes and {len(split.ext_dev)} inputs but "
                                f"{len(outs)} output ids and {len(ext)} input ids")
        temps = check_temps(h.get("temps"), split.n_nodes)
        kept = kept_nodes(split.n_nodes, temps) if temps else None  # (None: every node's id becomes a handle)
        kept_ids = outs if kept is None else [outs[j] for j in kept]
        if not handles.keys().isdisjoint(kept_ids):
            raise ProtocolError("an output id is already a live handle of this session")
        if failed_ext:  # an input failed before reaching any worker: the whole batch fails with it
            raise self._input_failed(ext, failed_ext)
        dyn = h.get("dyn") or []
        if not isinstance(dyn, list):
            raise ProtocolError("'dyn' must be a list")
        dyn_by_node: dict[int, dict] = {}
        for item in dyn:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                    and isinstance(item[1], dict)):
                raise ProtocolError("'dyn' entries must be [node, attrs]")
            dyn_by_node[item[0]] = item[1]
        colls = self._check_collectives(split, nodes, dyn_by_node) if split.coll_groups else None
        # --- everything validated: commit state and send ---
        for p in drop_plans:
            s.plans.pop(p, None)
        if nodes is not None and plan_no is not None:
            if len(s.plans) >= MAX_PLANS:
                s.plans.pop(next(iter(s.plans)))
            s.plans[plan_no] = split
        if kept is None:
            handles.update(zip(outs, split.node_dev))
        else:
            node_dev = split.node_dev
            handles.update((outs[j], node_dev[j]) for j in kept)
        if s.failed:
            for i in kept_ids:
                s.failed.pop(i, None)
            for i in release:
                s.failed.pop(i, None)
        by_dev_release: dict[str, list[int]] = {}
        for i in release:
            d = handles.pop(i, None) or locs.get(i)
            if d is not None:
                by_dev_release.setdefault(d, []).append(i)
        by_dev_fetch: dict[str, list[int]] = {}
        fetch_errors = []
        for i in fetch:
            d = s.handles.get(i) or locs.get(i)
            if d is None:
                if len(fetch_errors) >= MAX_FETCH_ERRORS:
                    continue
                err = s.failed.get(i) or NotFound(f"handle {i} does not exist in this session").to_wire()
                fetch_errors.append({**err, "fetched": i})
            else:
                by_dev_fetch.setdefault(d, []).append(i)
        reply_devs = set(by_dev_fetch)
        if h.get("sync"):  # every device holding the session's state, this batch's own included
            reply_devs |= (s.touched | set(split.frags)) & set(self.workers)
        coll_map, coll_direct = self._announce_collectives(s, colls) if colls else (None, None)
        xbase = self.next_x
        self.next_x += split.n_xfer
        xto: dict[str, list] = {}  # source device -> its transfers that go straight to the destination's worker
        for k, (src, dst) in enumerate(split.xfer_route):
            self.xroutes[xbase + k] = (s.sid, src, dst)
            peer = self._peer(src, dst)
            if peer is not None:
                xto.setdefault(src, []).append([k, *peer])
        devs = set(split.frags) | set(by_dev_release) | reply_devs
        nbytes = sum(map(len, frames)) if frames else 0
        # a batch split across devices releases each device's temporaries by id (a whole one passes the ranges on)
        temp_nodes = (set(range(split.n_nodes)).difference(kept)
                      if temps and not all(f.whole for f in split.frags.values()) else ())
        for dev in devs:
            w = self.workers.get(dev)
            if w is None:
                continue
            frag = split.frags.get(dev)
            msg = {"t": "run", "s": s.sid, "q": q, "x": xbase, "reply": dev in reply_devs,
                   "fetch": by_dev_fetch.get(dev, []), "release": by_dev_release.get(dev, [])}
            if prof is not None:
                msg["prof"] = prof
            if dev in xto:
                msg["xto"] = xto[dev]
            counters = self.telemetry.device(dev)
            counters.batches += 1
            if frag is not None:
                counters.ops += len(frag.nodes)
                counters.bytes_in += nbytes
            if coll_map:
                msg["coll"] = coll_map
                if coll_direct:  # these go over the devices' own transport (NCCL), not shared memory
                    msg["coll_direct"] = coll_direct
            if frag is not None:
                if frag.whole:  # the batch runs on this one device, in order: ids pass through as they are
                    msg["ext"] = ext
                    if out_first is None:
                        msg["outs"] = outs
                    else:
                        msg["out_first"] = out_first
                    if temps:
                        msg["temps"] = temps
                else:
                    msg["ext"] = [ext[k] for k in frag.ext]
                    msg["outs"] = [outs[j] if j is not None else None for j in frag.node_of]
                    if temp_nodes:  # this device's share of the temporaries: released once the fragment ran
                        msg["release"] = msg["release"] + [outs[j] for j in frag.node_of
                                                           if j is not None and j in temp_nodes]
                if plan_no is not None:
                    msg["plan"] = plan_no
                    key = (s.sid, plan_no)
                    if nodes is not None or key not in w.plans:
                        msg["nodes"] = frag.nodes
                        w.plans.add(key)
                else:
                    msg["nodes"] = frag.nodes
                if frag.dyn_nodes and dyn_by_node:
                    msg["dyn"] = [[li, dyn_by_node[frag.node_of[li]]] for li in frag.dyn_nodes
                                  if frag.node_of[li] in dyn_by_node]
                s.touched.add(dev)
            self._to_service(w, msg, frames if frag is not None else ())
        if reply_devs or h.get("sync") or fetch:
            p = Pending(set(d for d in reply_devs if d in self.workers))
            if prof is not None:
                p.prof = (prof, t0)
            p.errors.extend(s.errors)
            s.errors = []
            p.fetch_errors.extend(fetch_errors)
            s.pending[q] = p
            self._maybe_reply(s, q)

    def _input_failed(self, ext: list[int], failed_ext: dict) -> TensorwireError:
        """The error of a batch whose input failed before reaching a worker (``state.input_failed``); a lost input
        whose device has a worker again also says how that worker's predecessor ended, as its supervisor told it
        (``LocalCluster`` restarts a worker that exits, see docs/reliability.md)."""
        err = input_failed(ext, failed_ext)
        w = self.workers.get(err.device) if isinstance(err, WorkerLost) and err.device else None
        why = w.info.get(RESTARTED_INFO) if w is not None else None
        if isinstance(why, str) and why:  # (said of this batch only: the cause its dependents name stays the root)
            err.message = (f"{err.message}. Its worker has been restarted since: the lost one {why[:300]}. Tensors "
                           f"made on {err.device} now work")
            err.args = (err._text(),)
        return err

    def _peer(self, src: str, dst: str) -> list | None:
        """How ``src``'s worker reaches ``dst``'s directly: ``[address, CURVE key or None, same host]``; None: through
        this dispatcher (``dst`` has no direct channel, or they do not agree on encryption)."""
        a, b = self.workers.get(src), self.workers.get(dst)
        if a is None or b is None or not isinstance(b.info.get("direct"), str):
            return None
        key = b.info.get("direct_key")
        if bool(a.info.get("direct_key")) != bool(key):
            return None
        host = a.info.get("host")
        if not reachable(b, host):  # (its loopback is not the source's)
            return None
        shm = host == b.info.get("host") and isinstance(a.info.get("shm_dir"), str) and a.info.get(
            "shm_dir") == b.info.get("shm_dir")
        return [b.info["direct"], key if isinstance(key, str) else None, shm]

    def _locs(self, s: Session, locs) -> dict:
        """``{id: device}`` from a batch's ``locs`` (``{device: [ids]}``): where the handles the client made on
        direct channels live, which this dispatcher never saw. Only for ids it does not know itself, and only on
        devices served now; the worker holding them checks that they are the session's (it keeps each session's
        buffers apart), so a client naming ids it does not hold gets NotFound from there."""
        out = {}
        for dev, ids in device_ids(locs, "locs"):
            if dev in self.workers:
                s.touched.add(dev)
                for i in ids:
                    out[i] = dev
        return out

    @staticmethod
    def _lost_handles(s: Session, lost) -> None:
        """Handles the client made on a direct channel to a worker that died (``{device: [ids]}``): using one fails
        with ``WorkerLost``, as for the handles this dispatcher routed there itself."""
        for dev, ids in device_ids(lost, "lost"):
            err = error_to_wire(WorkerLost(f"the worker for {dev[:128]} was lost; tensors on {dev[:128]} are lost",
                                           device=dev[:128]))
            for i in ids:
                if i not in s.handles:
                    s.failed[i] = err

    def _progress(self, svc: ServiceInfo, h: dict, frames=()) -> None:
        """Pass a worker's download progress on to the session it names, only if that worker serves the session's
        work; a malformed report is dropped and logged (``tensorwire.protocol.progress``)."""
        sid = h.get("s")
        s = self.sessions.get(sid) if type(sid) is bytes else None
        fields = check_progress(h)
        if fields is None or svc.kind != "worker" or self.workers.get(svc.name) is not svc:
            log.warning("dropping a malformed progress report from %s %s", svc.kind, svc.name)
            return
        if s is None or svc.name not in s.touched:  # (a session that closed meanwhile: nobody waits for it)
            log.debug("dropping a progress report from %s for a session it does not serve", svc.name)
            return
        self._to_client(s.ident, {"t": "progress", **fields, "device": svc.name})

    def _relay_xfer(self, svc: ServiceInfo, h: dict, frames) -> None:
        """A cross-device value from its source's worker, relayed to the destination's (when they have no direct
        channel between them)."""
        x = h.get("x")
        route = self.xroutes.get(x) if type(x) is int else None
        if route is not None and route[1] == svc.name and h.get("s") == route[0]:
            del self.xroutes[x]
            dst = self.workers.get(route[2])
            if dst is not None:
                self._to_service(dst, h, frames)

    def _xfer_got(self, svc: ServiceInfo, h: dict, frames) -> None:
        """A transfer went straight from its source's worker to this one: forget its route."""
        x = h.get("x")
        route = self.xroutes.get(x) if type(x) is int else None
        if route is not None and route[2] == svc.name and h.get("s") == route[0]:
            del self.xroutes[x]
