"""``tensorwire status`` (:func:`main`): the cluster's state as a table (``render``) and the hub's health
(``hub_health``); with ``--local``, this host's devices as the installed backends see them.

The figures come from the dispatcher's ``stats`` answer (``Session.cluster_status``): per device its worker's load
as reported with the answer (sessions holding state there, queued and running batches, bytes held by sessions and
the per-session limit, the backend's own memory figures) and the dispatcher's throughput over the last seconds
(``dispatcher/telemetry.py``); the named services with the age of their last heartbeat; the hub's URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

from tensorwire.backends import backends
from tensorwire.protocol.credentials import ADMIN_TOKEN_ENV, CLIENT_TOKEN_ENV, resolve_token

from .session import Session

HUB_TIMEOUT_S = 2.0


def hub_health(url: str | None, timeout: float = HUB_TIMEOUT_S) -> dict | None:
    """``{"url", "ok", "detail"}`` for the cluster's hub (a GET of its root, which answers its service name), or
    None when the cluster has none."""
    if not url:
        return None
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=timeout) as r:  # noqa: S310 - the cluster's hub
            body = json.loads(r.read(4096) or b"{}")
        ok = body.get("service") == "tensorwire-hub"
        return {"url": url, "ok": ok, "detail": "reachable" if ok else "answers, but is not a tensorwire hub"}
    except (OSError, ValueError, urllib.error.URLError) as e:
        return {"url": url, "ok": False, "detail": f"not reachable: {getattr(e, 'reason', e)}"}


def human_bytes(n) -> str:
    """``n`` bytes for people: 512 B, 8.5 GiB."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def render(st: dict, address: str) -> str:
    """The status table for a ``stats`` answer (plus ``hub`` from :func:`hub_health`)."""
    me = st.get("session")
    live = st.get("live_sessions", len(st.get("sessions", [])))
    seen = "" if st.get("admin") else " (buffers: this session's only; the admin token shows every session's)"
    lines = [
        f"dispatcher {address}  up {st.get('uptime_s', 0):.0f}s  live sessions: {live} (this one included){seen}",
        "",
    ]
    head = (
        f"{'device':<10} {'backend':<24} {'sessions':>8} {'queue':>6} {'used':>11} {'limit/session':>14} "
        f"{'device memory':>14} {'batches/s':>10} {'ops/s':>9} {'MB/s':>8}  buffers per session"
    )
    lines.append(head)
    load = st.get("load") or {}
    for w in st.get("workers", []):
        d = w["device"]
        ld = load.get(d) or {}
        mem = ld.get("memory") or {}
        total = mem.get("total_bytes") or w.get("memory_bytes")
        sessions = {k: v for k, v in (st.get("devices") or {}).get(d, {}).items() if k != me}
        limit = human_bytes(ld["session_limit"]) if ld.get("session_limit") else ("none" if ld else "-")
        per = ", ".join(f"{k[:8]}: {v['buffers']} ({human_bytes(v['bytes'])})" for k, v in sessions.items()) or "-"
        lines.append(
            f"{d:<10} {str(w.get('name', ''))[:24]:<24} {ld.get('sessions', '-'):>8} {ld.get('queued', '-'):>6} "
            f"{human_bytes(ld.get('used_bytes')):>11} {limit:>14} "
            f"{human_bytes(total):>14} {ld.get('batches_per_s', 0.0):>10.1f} {ld.get('ops_per_s', 0.0):>9.0f} "
            f"{ld.get('bytes_per_s', 0.0) / 1e6:>8.2f}  {per}"
        )
    if not st.get("workers"):
        lines.append("(no workers registered)")
    lines.append("")
    services = st.get("service_info") or [{"name": n} for n in st.get("services", [])]
    if services:
        lines.append("services:")
        for sv in services:
            age = sv.get("heartbeat_age_s")
            heard = f"heard {age:.1f}s ago" if isinstance(age, (int, float)) else ""
            lines.append(f"  {sv['name']:<24} pid {sv.get('pid', '-'):<8} {heard}")
    else:
        lines.append("services: none (no autograd: backward() raises ServiceUnavailable; no collectives)")
    plane = st.get("data_plane") or {}
    if plane:
        lines.append("data plane (this host's path to each worker):")
        for d, p in sorted(plane.items()):
            if p.get("path") == "direct":
                how = ", ".join(w for w, on in (("same-host lane", p.get("lane")),
                                                ("shared memory", p.get("shared_memory")),
                                                ("CURVE", p.get("encrypted") and not p.get("lane"))) if on)
                lines.append(f"  {d:<10} direct  {p.get('address', '')}" + (f"  ({how})" if how else ""))
            else:
                lines.append(f"  {d:<10} relay   through the dispatcher: {p.get('why') or 'not used yet'}")
    hub = st.get("hub")
    lines.append(f"hub: {hub['url']}  {hub['detail']}" if hub else "hub: none configured (dispatcher --hub-url)")
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    """``tensorwire status``: print the cluster's state (or, with ``--local``, this host's devices); returns the exit
    status."""
    p = argparse.ArgumentParser(prog="tensorwire status", description="Show a cluster's state: per device its live "
                                "sessions, memory, queue and recent throughput; the hub and the named services.")
    p.add_argument("--address", default=os.environ.get("TENSORWIRE_ADDRESS", "tcp://127.0.0.1:5555"))
    p.add_argument("--token-file", default=None, help="file holding the client token (default $TENSORWIRE_TOKEN)")
    p.add_argument("--admin-token-file", default=None,
                   help="file holding the admin token, to see every session (default $TENSORWIRE_ADMIN_TOKEN)")
    p.add_argument("--keys", default=None, help="CURVE keys directory (default $TENSORWIRE_KEYS)")
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: one object a line)")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    p.add_argument("--count", type=int, default=None, help="with --watch: stop after N refreshes")
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--local", action="store_true",
                   help="list this host's devices as the installed backends see them (available or why not) instead "
                        "of asking a cluster")
    args = p.parse_args(argv)
    if args.local:
        return _local_devices(args.json)
    if args.watch is not None and args.watch <= 0:
        p.error("--watch needs a positive number of seconds")
    token = resolve_token(ADMIN_TOKEN_ENV, args.admin_token_file) or resolve_token(CLIENT_TOKEN_ENV, args.token_file)
    s = Session(args.address, token, timeout=args.timeout, keys=args.keys)
    clear = args.watch is not None and not args.json and sys.stdout.isatty()
    try:
        n = 0
        s.probe_channels()  # (which path this host's work would take to each worker: direct, or the relay and why)
        for _ in range(args.count if args.count is not None else 1 << 62):  # bounded by --count, or Ctrl-C
            st = s.cluster_status()
            st["hub"] = hub_health(st.get("hub_url"))
            if args.json:
                print(json.dumps(st, default=str, **({} if args.watch is not None else {"indent": 2})), flush=True)
            else:
                print(("\x1b[H\x1b[2J" if clear else "") + render(st, args.address), flush=True)
            n += 1
            if args.watch is None or (args.count is not None and n >= args.count):
                break
            time.sleep(args.watch)
    except KeyboardInterrupt:  # --watch ends with Ctrl-C: a clean stop, not an error
        pass
    finally:
        s.close()
    return 0


def _local_devices(as_json: bool) -> int:
    """``tensorwire status --local``: every installed backend's devices on this host, with the reason an
    unavailable one gives (no driver, no GPU ...). Loads the backends (and their drivers) in this process."""
    rows = [d.to_wire() for _, b in sorted(backends().items()) for d in b.devices()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'device':<10} {'state':<14} {'memory':>14}  name or reason")
    for d in rows:
        state = "available" if d["available"] else "not available"
        mem = human_bytes(d["memory_bytes"]) if d["memory_bytes"] else "-"
        print(f"{d['device']:<10} {state:<14} {mem:>14}  {d['name'] if d['available'] else d['reason']}")
    return 0
