"""Instructions a training step executes, counted by valgrind's callgrind, against PyTorch CPU's: issue 30's script
rows in a measure these runners repeat exactly.

Wall and CPU times move 30-50% between runs on the 2-core runners, so a change of a few percent in the client's
Python cannot be seen in them; the instructions a process executes are the same from run to run (well under 1%), so
it can. Each script of ``tests/programs`` named in :data:`SCRIPTS` runs under ``valgrind --tool=callgrind
--trace-children=yes`` twice on each side, ``train(build_model(), warm)`` then ``train(model, n)`` for two step
counts ``n``, and the difference of the two runs' counts over the difference of their steps is a step's instructions
(the start, the imports, the cluster's start and the datasets cancel out). Ours in the client and the worker of a
``LocalCluster(devices=["cpu:0"], worker_threads=1)`` (the dispatcher and the autograd service run uncounted, at full
speed: ~1% of a step's instructions, session 54), PyTorch's in its one process on one thread. Two rows a script, both
reported (no target): the client alone against PyTorch (the client's Python is these scripts' critical path:
BENCHMARKS.md, session 54) and the client and the worker together.

Counted with the busy-waits off (``TENSORWIRE_CLIENT_SPIN_MS=0``, ``TENSORWIRE_WORKER_SPIN_US=0``: a spin's
instructions are time waited, not work), heartbeats every 5 s and a long liveness (valgrind runs Python ~50x slower:
at the defaults the dispatcher declared the slowed worker lost), ``PYTHONHASHSEED=0``, and
``TENSORWIRE_CPU_COMPILE=0``: valgrind executes no AVX-512 (the kernels the worker builds with ``-march=native`` would
stop it), so the worker runs its numpy kernels, whose cost these scripts' rows show to be the compiled one's within
5% (the compiler on against off). Instructions are not time: a cache miss or a system call's wait costs none.
Skipped without valgrind (Debian: ``apt-get install valgrind``) or PyTorch. The group takes ~15 minutes (a
counted run of ours ~25 s; PyTorch's import under valgrind ~2 minutes a run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .harness import Result

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
#: ``(description, file, warm-up steps, the two step counts)``: scripts whose rows the client's Python bounds
SCRIPTS = [
    ("char-RNN name classifier (PyTorch tutorial), one name a step, loss.item() every step", "char_rnn_classifier.py",
     20, (10, 60)),
    ("MLP on MNIST read as torchvision's MNIST reads it, batch 100, Adam", "mnist_loader_mlp.py", 5, (5, 25)),
]
#: the most seconds one counted run may take (valgrind runs Python ~50x slower), and its services' exit
RUN_TIMEOUT_S = 900
STOP_TIMEOUT_S = 120
#: each counted process's part, by what its command line runs (the counted script itself is the client)
ROLES = (("tensorwire.cli worker", "worker"), ("tensorwire.cli dispatcher", "dispatcher"),
         ("tensorwire.cli autograd", "autograd"), ("benchmarks.instructions", "client"))
#: the environment of a counted run (see above)
COUNTED_ENV = {"PYTHONHASHSEED": "0", "TENSORWIRE_CPU_COMPILE": "0", "TENSORWIRE_CLIENT_SPIN_MS": "0",
               "TENSORWIRE_WORKER_SPIN_US": "0", "TENSORWIRE_HEARTBEAT_S": "5", "TENSORWIRE_LIVENESS": "300"}


def _child(side: str, path: Path, warm: int, steps: int) -> None:
    """The counted run (in the process valgrind started): ``train(build_model(), warm)``, then ``train(model,
    steps)``, with torch or with tensorwire in its place on a one-worker local cluster."""
    sys.path.insert(0, str(ROOT))
    from tests.programs._harness import load, tensorwire_as_torch

    def run() -> None:
        prog = load(path)
        model = prog.build_model()
        prog.train(model, warm)
        prog.train(model, steps)

    if side == "torch":
        import torch

        torch.set_num_threads(1)
        torch.manual_seed(0)
        run()
        return
    import tensorwire as tw
    from tensorwire.cluster import stop_together

    with tw.LocalCluster(devices=["cpu:0"], worker_threads=1) as cluster:
        session = tw.connect(cluster.address)
        try:
            with tensorwire_as_torch():
                run()
        finally:
            session.close()
            # (the services stopped with time to exit: a worker killed past the close's 5 s, as valgrind's slowed
            # one can be, leaves no count)
            stop_together(cluster.services.values(), STOP_TIMEOUT_S)


def _read_counts(folder: Path) -> dict[str, int]:
    """Instructions by role (:data:`ROLES`; ``other`` for the rest: a compiler's version asked) of the callgrind
    files in ``folder``."""
    counts: dict[str, int] = {}
    for f in folder.glob("cg.*"):
        cmd, total = "", None
        with open(f, errors="replace") as lines:
            for i, line in enumerate(lines):
                if line.startswith("cmd:"):
                    cmd = line
                elif line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
                    break
                if i > 100_000:  # (a header is a few lines; bounded anyway)
                    break
        if total is None:
            continue
        role = next((r for marker, r in ROLES if marker in cmd), "other")
        counts[role] = counts.get(role, 0) + total
    return counts


def count(side: str, path: Path, warm: int, steps: int) -> dict[str, int]:
    """Instructions by role of one run of ``path`` under callgrind (``side``: ``"torch"`` or ``"tensorwire"``)."""
    with tempfile.TemporaryDirectory(prefix="tw-instructions-") as tmp:
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
               "--trace-children-skip-by-arg=dispatcher,autograd", f"--callgrind-out-file={tmp}/cg.%p",
               sys.executable, "-m", "benchmarks.instructions", "--child", side, str(path), str(warm), str(steps)]
        env = {**os.environ, **COUNTED_ENV}
        done = subprocess.run(cmd, cwd=ROOT, env=env, timeout=RUN_TIMEOUT_S, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the counted run failed ({done.returncode}): {done.stderr[-2000:]}")
        return _read_counts(Path(tmp))


def per_step(side: str, path: Path, warm: int, steps: tuple[int, int]) -> dict[str, float]:
    """A step's instructions by role: two counted runs' difference over their steps' difference."""
    a, b = (count(side, path, warm, n) for n in steps)
    for role in ("client", "worker") if side == "tensorwire" else ("client",):
        if role not in a or role not in b:
            raise RuntimeError(f"no count of the {role} of {path.name}: it exited before valgrind wrote it")
    return {role: (b.get(role, 0) - a.get(role, 0)) / (steps[1] - steps[0]) for role in set(a) | set(b)}


def run_all() -> list[Result]:
    if shutil.which("valgrind") is None:
        return []
    try:
        import torch  # noqa: F401
    except ImportError:
        return []
    results = []
    for name, file, warm, steps in SCRIPTS:
        path = PROGRAMS / file
        peer = per_step("torch", path, warm, steps).get("client", 0.0)
        ours = per_step("tensorwire", path, warm, steps)
        if peer <= 0:
            continue
        client, worker = ours.get("client", 0.0), ours.get("worker", 0.0)
        note = (f"callgrind, {steps[1] - steps[0]} steps counted after {warm}, no busy-waits; the worker on its numpy "
                f"kernels (TENSORWIRE_CPU_COMPILE=0): {worker / 1e6:.2f} M a step")
        results.append(Result(f"script: {name}, instructions a step, the client vs PyTorch CPU's process (1 thread)",
                              client / 1e6, peer / 1e6, "M instr", client / peer, "report", True, note))
        results.append(Result(f"script: {name}, instructions a step, the client and the worker vs PyTorch CPU's",
                              (client + worker) / 1e6, peer / 1e6, "M instr", (client + worker) / peer, "report",
                              True, note))
    return results


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        _child(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        from .harness import table

        print(table(run_all()))
