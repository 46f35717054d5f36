"""The ``tensorwire`` command: ``up``, ``dispatcher``, ``worker``, ``status``, ``keys``, ``hub``, ``selftest``.

Credentials are read from files or environment variables, never from command-line values (``ps`` shows those).

Service modules are imported only by the subcommand that runs them, so the client stays thin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# (these modules are all light: the package's __init__ loads nothing, and the subcommands import what they run)
from tensorwire import __version__
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.credentials import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE,
    CLIENT_TOKEN_ENV,
    CLIENT_TOKEN_FILE,
    ensure_token_file,
    resolve_token,
    write_token_file,
)
from tensorwire.protocol.errors import TensorwireError

USAGE = """usage: tensorwire COMMAND [options]

commands:
  up          start a local cluster (dispatcher, workers, hub) and print its address; Ctrl-C stops all
  dispatcher  run the dispatcher
  worker      run a device worker (--device cpu:0 --dispatcher tcp://HOST:5556)
  autograd    run the autograd service (--dispatcher tcp://HOST:5556)
  collectives one rank of the collectives service (mpiexec -n N tensorwire collectives --devices ...)
  status      show the cluster's devices (sessions, memory, queue, throughput), hub and services (--watch, --json;
              --local: this host's devices, or why not)
  keys        create CURVE key pairs and a service credential for a cluster across hosts
  slurm       write an sbatch script that runs a whole cluster in one Slurm job (scancel stops it)
  hub         run the model hub, or push/list models (tensorwire hub --help)
  dashboard   serve the cluster's live dashboard in a browser (loopback; --admin-token-file)
  health      exit 0 when the dispatcher or the hub answers and the named services are registered
  selftest    prove one device of this install works, in minutes (--device cuda:0; correctness and speed rows)

Run `tensorwire COMMAND --help` for a command's options; `tensorwire --version` prints the version."""


def version_line() -> str:
    """``tensorwire X.Y.Z (protocol N, Python A.B.C)``: what ``tensorwire --version`` prints."""
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    import platform

    return f"tensorwire {__version__} (protocol {PROTOCOL_VERSION}, Python {platform.python_version()})"


def _up(argv: list[str]) -> int:
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from tensorwire.hub.client import DEFAULT_PORT as HUB_PORT

    from .cluster import LocalCluster, RestartPolicy

    r = RestartPolicy()
    p = argparse.ArgumentParser(prog="tensorwire up", description=(
        f"Start a local cluster; Ctrl-C stops it. A worker that exits is restarted (after {r.first_s:g} s, doubling "
        f"to {r.max_s:g} s; at most {r.limit} restarts in {r.window_s:g} s); another service exiting stops it."))
    p.add_argument("--devices", default="cpu:0", help="comma-separated devices (default cpu:0)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5555, help="client port (0 picks a free one)")
    p.add_argument("--hub-root", default=None, help="start the model hub with this storage folder")
    p.add_argument("--hub-url", default=None, help="use a hub already running there (instead of --hub-root)")
    p.add_argument("--hub-port", type=int, default=None,
                   help=f"the hub's port (default {HUB_PORT}, as `tensorwire hub`; 0 picks a free one)")
    p.add_argument("--token-file", default=None,
                   help="file holding the token clients must present (default $TENSORWIRE_TOKEN)")
    p.add_argument("--keys", default=None, help="CURVE keys directory from `tensorwire keys` (default "
                   "$TENSORWIRE_KEYS); required when --host is not loopback, unless --insecure")
    p.add_argument("--insecure", action="store_true", help="listen on a non-loopback --host without CURVE")
    p.add_argument("--log-dir", default=None, help="where services write their logs")
    p.add_argument("--session-memory", default=None,
                   help="most memory one session may hold on each device: 50%% (the default), 4GiB, none")
    p.add_argument("--metrics", action="store_true",
                   help="serve Prometheus metrics from the dispatcher and the hub on free local ports")
    p.add_argument("--dashboard", nargs="?", type=int, const=0, default=None, metavar="PORT",
                   help="serve the dashboard on loopback (on PORT; without one, a free port)")
    args = p.parse_args(argv)
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from tensorwire.protocol.service import stop_event_on_signals

    if args.hub_port is not None and args.hub_root is None:
        p.error("--hub-port needs --hub-root (the hub's storage folder)")
    if args.hub_url is not None and args.hub_root is not None:
        p.error("give --hub-root (start a hub) or --hub-url (use a running one), not both")
    hub_port = HUB_PORT if args.hub_port is None else args.hub_port
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from tensorwire.protocol.addresses import check_port_free

    check_port_free("the dispatcher", args.host, args.port, "--port")
    if args.hub_root is not None:
        check_port_free("the hub", args.host, hub_port, "--hub-port")
    stop = stop_event_on_signals()
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    with LocalCluster(devices=devices, hub_root=args.hub_root, host=args.host, port=args.port,
                      token=resolve_token(CLIENT_TOKEN_ENV, args.token_file), log_dir=args.log_dir,
                      keys=args.keys, insecure=args.insecure, session_memory=args.session_memory,
                      metrics=args.metrics, hub_port=hub_port, hub_url=args.hub_url,
                      dashboard=False if args.dashboard is None else (args.dashboard or True)) as c:
        admin_file = write_token_file(c.log_dir / "admin.token", c.admin_token)
        print(f"tensorwire cluster up: {c.address}  devices: {', '.join(devices)}")
        print(f"  connect with: tw.connect({c.address!r})  or  TENSORWIRE_ADDRESS={c.address}")
        print(f"  admin token (every session in status): tensorwire status --address {c.address} "
              f"--admin-token-file {admin_file}")
        print("  listening:")
        for line in _listening(c):
            print(f"    {line}")
        if c.hub_token_file:
            print(f"  hub: {c.hub_url}  write token in: {c.hub_token_file}  (readable by you only)")
        elif c.hub_url:
            print(f"  hub: {c.hub_url}  (running elsewhere: the workers download from it)")
        for name, url in c.metrics_urls.items():
            print(f"  metrics ({name}): {url}")
        # one write with its newline (PYTHONUNBUFFERED makes print's end a second write, which a reader that has
        # seen this line and gone would fail with a broken pipe)
        print(f"  logs: {c.log_dir}   (Ctrl-C stops all)\n", end="", flush=True)
        while not stop.is_set():  # (a worker that exits is restarted by the cluster: see LocalCluster's restart)
            dead = c.down()
            if dead:
                why = "; ".join(f"{n} {w}" for n, w in dead.items())
                print(f"service(s) exited: {why}; stopping", file=sys.stderr)
                return 1
            stop.wait(1.0)
    try:
        print("tensorwire cluster stopped", flush=True)
    except BrokenPipeError:  # `tensorwire up | tee log` on Ctrl-C: tee got the signal too and is gone
        _drop_stdout()
    return 0


def _drop_stdout() -> None:
    """Send what is left of stdout nowhere: its reader is gone (Python's advice for a broken pipe, so that the
    flush at exit does not fail again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _listening(c) -> list[str]:
    """One line per service of a LocalCluster: where it listens, or whom it connects to."""
    lines = [f"{'dispatcher':<12} {c.address}  (clients)", f"{'':<12} {c.service_address}  (services)"]
    if c.hub_url:
        lines.append(f"{'hub':<12} {c.hub_url}")
    if c.dashboard_url:
        lines.append(f"{'dashboard':<12} {c.dashboard_url}  (browser; loopback: the admin view)")
    for name, svc in c.services.items():
        if name not in ("dispatcher", "hub", "dashboard"):
            lines.append(f"{name:<12} pid {svc.proc.pid}, connected to {c.service_address}")
    return lines


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")


def _set_threads(argv: list[str]) -> None:
    """Apply ``--threads N`` (or TENSORWIRE_WORKER_THREADS) to the BLAS/OpenMP pools of this process."""
    n = os.environ.get("TENSORWIRE_WORKER_THREADS")
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            n = argv[i + 1]
        elif a.startswith("--threads="):
            n = a.split("=", 1)[1]
    if n:
        for v in THREAD_VARS:  # for child processes and libraries loaded later
            os.environ[v] = str(int(n))
        try:  # numpy's BLAS is already loaded (importing tensorwire imports numpy): limit it at run time
            # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
            from threadpoolctl import threadpool_limits

            threadpool_limits(int(n))
        except ImportError:
            pass


def _status(argv: list[str]) -> int:
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
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from .session import Session
    from .status import hub_health, render

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


def _keys(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tensorwire keys",
        description="Create a keys directory for a cluster across hosts: CURVE key pairs for the dispatcher, the "
                    "services and the clients, and the service credential (existing files are kept).")
    p.add_argument("--dir", required=True, help="the keys directory to create or extend")
    p.add_argument("--client", action="append", default=[], metavar="NAME",
                   help="also create (and authorise) the client pair NAME.key/NAME.key_secret (repeatable)")
    p.add_argument("--service", action="append", default=[], metavar="NAME",
                   help="also create (and authorise) the service pair NAME.key/NAME.key_secret (repeatable)")
    p.add_argument("--tokens", action="store_true",
                   help=f"also create the client token ({CLIENT_TOKEN_FILE}) and the admin token ({ADMIN_TOKEN_FILE}) "
                        "for the dispatcher's --token-file and --admin-token-file (existing ones are kept)")
    args = p.parse_args(argv)
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from tensorwire.protocol.curve import create_keys

    d = create_keys(args.dir, clients=("client", *args.client), services=("service", *args.service))
    print(f"keys in {d}:")
    if args.tokens:
        for name in (CLIENT_TOKEN_FILE, ADMIN_TOKEN_FILE):
            made = ensure_token_file(d / name)
            print(f"  {'created' if made else 'kept'} {d / name}")
    print(f"  dispatcher host: --keys {d}  (reads dispatcher.key_secret, clients/, services/)")
    print("  service hosts:   a directory with dispatcher.key, service.key_secret, service.token")
    print("  clients:         a directory with dispatcher.key, client.key_secret  (TENSORWIRE_KEYS=DIR)")
    return 0


def _local_devices(as_json: bool) -> int:
    """``tensorwire status --local``: every installed backend's devices on this host, with the reason an
    unavailable one gives (no driver, no GPU ...). Loads the backends (and their drivers) in this process."""
    # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
    from tensorwire.backends import backends
    from tensorwire.status import human_bytes

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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tensorwire`` command; errors print one line and exit 1."""
    try:
        return _main(argv)
    except TensorwireError as e:
        print(f"tensorwire: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version", "version"):
        print(version_line())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "up":
        return _up(rest)
    if cmd == "dispatcher":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.dispatcher.server import main as m

        return m(rest)
    if cmd == "worker":
        _set_threads(rest)  # before numpy is imported: BLAS reads these once
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.backends.worker import main as m

        return m(rest)
    if cmd == "status":
        return _status(rest)
    if cmd == "keys":
        return _keys(rest)
    if cmd == "collectives":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.collectives.service import main as m

        return m(rest)
    if cmd == "autograd":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.autograd.service import main as m

        return m(rest)
    if cmd == "hub":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.hub.cli import main as m

        return m(rest)
    if cmd == "selftest":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from .selftest import main as m

        return m(rest)
    if cmd == "dashboard":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from tensorwire.dashboard.server import main as m

        return m(rest)
    if cmd == "health":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from .healthcheck import main as m

        return m(rest)
    if cmd == "slurm":
        # lazy: a subcommand's modules load only when it runs (the CLI's start-up time)
        from .slurm import main as m

        return m(rest)
    print(f"tensorwire: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
