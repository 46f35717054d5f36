"""``tensorwire slurm``: write an ``sbatch`` script that runs a whole tensorwire cluster inside one Slurm job.

The script, run by Slurm on the allocation's first node, makes CURVE keys and tokens for the job (in the job folder,
readable by the user only), starts the hub, the dispatcher and the autograd service there, then with ``srun`` one
worker per device on every node and the collectives' MPI ranks (``srun --mpi=pmi2``: rank i on the node of
``devices[i]``'s worker), waits for each with ``tensorwire health``, prints the address and writes the clients'
settings to ``JOB_DIR/cluster.env``. ``scancel`` (or the time limit) sends SIGTERM: the script's trap stops the
services, the last started first, within ``--stop-s`` seconds (below Slurm's default KillWait, 30 s).

Devices are named cluster-wide: on several nodes, node k's devices of a kind are numbered after node k-1's (two
nodes of four GPUs serve cuda:0-3 and cuda:4-7), and each worker opens its device by its index on its own node
(``tensorwire worker --local-index``, Slurm's ``SLURM_LOCALID`` order within the node).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter
from pathlib import Path

from tensorwire import __version__
from tensorwire.protocol.errors import ConfigurationError

GPU_BACKENDS = ("cuda", "rocm")

SCRIPT = r"""#!/bin/bash
{sbatch}
# Written by `tensorwire slurm` (tensorwire {version}): a tensorwire cluster inside this job. The hub, the dispatcher
# and the autograd service run here on the first node; `srun` starts one worker per device on each node and the
# collectives' MPI ranks. Clients: `source JOB_DIR/cluster.env` (written once all is up). `scancel` stops it all.
set -uo pipefail

# the tensorwire this was written with (the same path on every node), and the devices: the worker of srun task i
# serves devices[i] (its device locals[i] on its node), and so does collectives rank i
TW=({tw})
DEVICES={devices}
LOCALS={locals}
PER_NODE={per_node}
PORT={port}; SERVICE_PORT={service_port}; HUB_PORT={hub_port}
WAIT_S={wait_s}; STOP_S={stop_s}
JOB_DIR="{job_dir}"
HUB_ROOT="{hub_root}"
export TENSORWIRE_MPI_IFACE={mpi_iface}
{extra_env}
HEAD=$(hostname)
KEYS=$JOB_DIR/keys; LOGS=$JOB_DIR/logs
ADDRESS=tcp://$HEAD:$PORT; SERVICES=tcp://$HEAD:$SERVICE_PORT; HUB_URL=http://$HEAD:$HUB_PORT
mkdir -p "$LOGS" && chmod 700 "$JOB_DIR" || exit 1
"${{TW[@]}}" keys --dir "$KEYS" --tokens >/dev/null || exit 1
"${{TW[@]}}" hub token create --root "$HUB_ROOT" --name "slurm-$SLURM_JOB_ID" --write \
    --out "$JOB_DIR/hub-write.token" >/dev/null || exit 1

pids=(); names=()
stop() {{  # scancel, the time limit, or a service that failed: stop the services, the last started first
    trap - TERM INT
    echo "tensorwire: stopping job $SLURM_JOB_ID"
    rm -f "$JOB_DIR/cluster.env"
    local i end=$((SECONDS + STOP_S))
    for ((i = ${{#pids[@]}} - 1; i >= 0; i--)); do
        kill -TERM "${{pids[i]}}" 2>/dev/null
        while kill -0 "${{pids[i]}}" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
    done
    for i in "${{pids[@]}}"; do kill -KILL "$i" 2>/dev/null && echo "tensorwire: killed $i after ${{STOP_S}}s"; done
    echo "tensorwire: stopped"
    exit "${{1:-0}}"
}}
trap 'stop 0' TERM INT

start() {{  # start NAME COMMAND...: in the background, logging to LOGS/NAME.log
    local name=$1; shift
    "$@" >"$LOGS/$name.log" 2>&1 &
    pids+=($!); names+=("$name")
}}

exited() {{  # the names of the services that have exited
    local i; for i in "${{!pids[@]}}"; do kill -0 "${{pids[i]}}" 2>/dev/null || echo -n "${{names[i]}} "; done
}}

ready() {{  # ready WHAT HEALTH-ARGS...: wait (at most WAIT_S) until `tensorwire health` says so
    local what=$1 end=$((SECONDS + WAIT_S)); shift
    until "${{TW[@]}}" health "$@" >"$LOGS/health.log" 2>&1; do
        if [[ -n $(exited) ]]; then
            echo "tensorwire: $(exited)exited before $what was ready; logs in $LOGS" >&2
            stop 1
        fi
        if ((SECONDS >= end)); then
            echo "tensorwire: $what not ready after ${{WAIT_S}}s: $(tail -n 1 "$LOGS/health.log"); logs in $LOGS" >&2
            stop 1
        fi
        sleep 1 & wait $!  # (a signal interrupts wait, not a foreground sleep)
    done
}}

client=(--keys "$KEYS" --token-file "$KEYS/client.token")
start hub "${{TW[@]}}" hub --root "$HUB_ROOT" --host 0.0.0.0 --port "$HUB_PORT"
start dispatcher "${{TW[@]}}" dispatcher --address "tcp://0.0.0.0:$PORT" --service-address \
    "tcp://0.0.0.0:$SERVICE_PORT" --keys "$KEYS" --token-file "$KEYS/client.token" \
    --admin-token-file "$KEYS/admin.token" --hub-url "$HUB_URL"
ready hub "$HUB_URL"
ready dispatcher "$ADDRESS" --keys "$KEYS"
start autograd "${{TW[@]}}" autograd --dispatcher "$SERVICES" --keys "$KEYS"
pick='d=(${{1//,/ }}); l=(${{2//,/ }}); shift 2; exec "$@" --device "${{d[SLURM_PROCID]}}" \
    --local-index "${{l[SLURM_PROCID]}}"'  # task i: devices[i], its node's device locals[i]
start workers srun --overlap --ntasks-per-node="$PER_NODE" --distribution=block --kill-on-bad-exit=1 \
    --output="$LOGS/worker-%t.log" bash -c "$pick" worker "$DEVICES" "$LOCALS" \
    "${{TW[@]}}" worker --dispatcher "$SERVICES" --keys "$KEYS" --hub-url "$HUB_URL"
ready workers "$ADDRESS" "${{client[@]}}" --service autograd $(printf -- '--device %s ' ${{DEVICES//,/ }})
# a rank stops on SIGTERM without MPI_Finalize, which would unlink MPICH's shared-memory segment: each node's task
# removes the segments its job made (new since it started, mapped by no process) once its rank has exited
rank='trap : TERM; old=$(echo /dev/shm/mpich_shm_*); "$@"; s=$?; for f in /dev/shm/mpich_shm_*; do
    [[ -e $f && " $old " != *" $f "* ]] && ! grep -qsF "$f" /proc/[0-9]*/maps && rm -f "$f"; done; exit $s'
start collectives srun --overlap --ntasks-per-node="$PER_NODE" --distribution=block --kill-on-bad-exit=1 --mpi=pmi2 \
    --output="$LOGS/collectives-%t.log" bash -c "$rank" rank \
    "${{TW[@]}}" collectives --devices "$DEVICES" --dispatcher "$SERVICES" --keys "$KEYS"
ready collectives "$ADDRESS" "${{client[@]}}" $(printf -- '--service collectives@%s ' ${{DEVICES//,/ }})

umask 077
cat >"$JOB_DIR/cluster.env.tmp" <<EOF
export TENSORWIRE_ADDRESS=$ADDRESS
export TENSORWIRE_KEYS=$KEYS
export TENSORWIRE_TOKEN=\$(cat $KEYS/client.token)
export TENSORWIRE_HUB_URL=$HUB_URL
EOF
echo "tensorwire cluster up in job $SLURM_JOB_ID: $ADDRESS  devices: $DEVICES  hub: $HUB_URL"
echo "  clients: source $JOB_DIR/cluster.env  (the keys directory holds the clients' files)"
echo "  hub write token: $JOB_DIR/hub-write.token   logs: $LOGS   stop: scancel $SLURM_JOB_ID"
mv "$JOB_DIR/cluster.env.tmp" "$JOB_DIR/cluster.env"  # (last: scripts wait for it)

wait -n  # until a service exits (or a signal runs the trap)
echo "tensorwire: $(exited)exited; stopping the others (logs in $LOGS)" >&2
stop 1
"""


def cpu_sockets() -> int:
    """How many CPU sockets this host has (Linux's topology files; 1 where they cannot be read)."""
    ids = set()
    for f in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id"):
        try:
            ids.add(f.read_text().strip())
        except OSError:
            pass
    return max(1, len(ids))


def job_devices(nodes: int, per_node: list[str]) -> list[tuple[str, int]]:
    """Every worker's ``(cluster-wide device name, index on its node)``, node by node. On one node the names are as
    given; on several, node k's devices of a kind follow node k-1's (``cuda:0,cuda:2`` on two nodes: cuda:0-1 on the
    first, cuda:2-3 on the second, each opening its node's GPUs 0 and 2). ConfigurationError for a repeated or
    malformed name."""
    if len(set(per_node)) != len(per_node) or any(":" not in d or not d.split(":")[1].isdigit() for d in per_node):
        raise ConfigurationError(f"--devices {','.join(per_node)}: give distinct devices like cpu:0,cpu:1 or cuda:0")
    local = [(d.split(":")[0], int(d.split(":")[1])) for d in per_node]
    if nodes == 1:
        return [(d, i) for d, (_, i) in zip(per_node, local)]
    count = Counter(kind for kind, _ in local)
    out = []
    for node in range(nodes):
        seen: dict[str, int] = {}
        for kind, i in local:
            j = seen[kind] = seen.get(kind, -1) + 1
            out.append((f"{kind}:{node * count[kind] + j}", i))
    return out


def render(args: argparse.Namespace) -> str:
    """The sbatch script for parsed ``tensorwire slurm`` options."""
    if args.gpus_per_node and args.devices:
        raise ConfigurationError("give --gpus-per-node or --devices, not both")
    if args.devices:
        per_node = [d.strip() for d in args.devices.split(",") if d.strip()]
    elif args.gpus_per_node:
        per_node = [f"{args.gpu_backend}:{i}" for i in range(args.gpus_per_node)]
    else:
        per_node = [f"cpu:{i}" for i in range(args.workers_per_node or cpu_sockets())]
    devices = job_devices(args.nodes, per_node)
    if args.nodes > 1 and args.mpi_iface == "lo":
        raise ConfigurationError(f"--nodes {args.nodes}: the collectives' ranks talk across nodes; give --mpi-iface "
                                 "with the interface the nodes reach each other on (eth0, ib0 ...)")
    gpus = sum(not d.startswith("cpu:") for d in per_node)
    lines = [f"--job-name={args.job_name}", f"--nodes={args.nodes}", f"--ntasks-per-node={len(per_node)}",
             f"--output={args.output_log}"]
    lines += [f"--gres=gpu:{gpus}"] if gpus else []
    lines += [f"--time={args.time}"] if args.time else []
    lines += [f"--partition={args.partition}"] if args.partition else []
    lines += args.sbatch
    cpu_top = max((i + 1 for d, i in devices if d.startswith("cpu:")), default=0)
    extra = f"export TENSORWIRE_CPU_DEVICES={cpu_top}" if cpu_top > 8 else ""  # (the CPU backend's default: 8)
    q = shlex.quote
    return SCRIPT.format(
        sbatch="\n".join(f"#SBATCH {x}" for x in lines), version=__version__,
        tw=" ".join(q(x) for x in shlex.split(args.tensorwire)), devices=q(",".join(d for d, _ in devices)),
        locals=q(",".join(str(i) for _, i in devices)), per_node=len(per_node),
        port=args.port, service_port=args.service_port, hub_port=args.hub_port, wait_s=args.wait_s,
        stop_s=args.stop_s, job_dir=args.job_dir, hub_root=args.hub_root or "$JOB_DIR/hubdata",
        mpi_iface=q(args.mpi_iface), extra_env=extra)


def parser() -> argparse.ArgumentParser:
    """The options of ``tensorwire slurm``."""
    p = argparse.ArgumentParser(prog="tensorwire slurm", description=(
        "Write an sbatch script that runs a tensorwire cluster in one Slurm job: the hub, the dispatcher and autograd "
        "on the first node, one worker per device on each node and the collectives' MPI ranks (srun), with CURVE "
        "keys made for the job. `sbatch` it; `scancel` stops everything. docs/deployment.md has the walk-through."))
    p.add_argument("-o", "--output", default="-", help="write the script here (default: stdout)")
    p.add_argument("--nodes", type=int, default=1, help="nodes to allocate (default 1)")
    p.add_argument("--gpus-per-node", type=int, default=0, help="one worker per GPU: requests --gres=gpu:G")
    p.add_argument("--gpu-backend", choices=GPU_BACKENDS, default="cuda", help="the GPUs' backend (default cuda)")
    p.add_argument("--workers-per-node", type=int, default=None,
                   help="CPU workers per node (default: one per CPU socket of this host)")
    p.add_argument("--devices", default=None, help="one node's devices, e.g. cuda:0,cuda:2 or cpu:0,cpu:1")
    p.add_argument("--mpi-iface", default="lo", help="the collectives' network interface (needed with --nodes > 1)")
    p.add_argument("--port", type=int, default=5555, help="the dispatcher's client port (default 5555)")
    p.add_argument("--service-port", type=int, default=5556, help="the dispatcher's service port (default 5556)")
    p.add_argument("--hub-port", type=int, default=8700, help="the hub's port (default 8700)")
    p.add_argument("--job-dir", default="$SLURM_SUBMIT_DIR/tensorwire-$SLURM_JOB_ID",
                   help="keys, tokens, logs and cluster.env, on a filesystem every node sees; the job's variables "
                        "expand (default: $SLURM_SUBMIT_DIR/tensorwire-$SLURM_JOB_ID)")
    p.add_argument("--hub-root", default=None,
                   help="the hub's storage folder, kept across jobs (default JOB_DIR/hubdata)")
    p.add_argument("--job-name", default="tensorwire")
    p.add_argument("--time", default=None, help="the job's time limit (sbatch --time)")
    p.add_argument("--partition", default=None, help="sbatch --partition")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                   help="another #SBATCH line, e.g. --sbatch=--account=lab (repeatable)")
    p.add_argument("--output-log", default="tensorwire-%j.out", help="the job's stdout (sbatch --output)")
    p.add_argument("--wait-s", type=int, default=300, help="seconds each service may take to be ready")
    p.add_argument("--stop-s", type=int, default=20, help="seconds the services get to stop on scancel")
    p.add_argument("--tensorwire", default=shlex.join([sys.executable, "-m", "tensorwire.cli"]), metavar="COMMAND",
                   help="the command that runs tensorwire on the nodes (default: this Python's, which must be at the "
                        "same path on every node)")
    return p


def main(argv: list[str]) -> int:
    """``tensorwire slurm [options]``: write the script; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 0 or (args.workers_per_node is not None and args.workers_per_node < 1):
        p.error("--nodes and --workers-per-node must be at least 1, --gpus-per-node at least 0")
    text = render(args)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        Path(args.output).chmod(0o755)
        print(f"wrote {args.output}: sbatch {args.output}", file=sys.stderr)
    return 0
