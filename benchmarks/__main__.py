"""``python -m benchmarks``: run every benchmark and print the table recorded in BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import platform

# Idle OpenMP threads sleep, on both sides: the peers (PyTorch, torch.compile) run in this process interleaved with
# ours, and torch's threads spinning after its round took the cores from our worker's next round (the fused chain
# measured 9 ms against 5.5 ms with both passive; torch.compile's own time did not change). The cluster's workers
# are passive already (LocalCluster sets it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tensorwire.backends.cpu.blas import describe  # noqa: E402
from tests._bytecode import compile_tree  # noqa: E402

from .harness import table  # noqa: E402

compile_tree()  # (as a wheel install would have: the clusters' processes and the cold rows import compiled code)


def main() -> None:
    p = argparse.ArgumentParser(description="tensorwire benchmarks (ratios against peers run side by side)")
    p.add_argument("--only", default=None,
                   help="run one group: core, dataplane, hosts, programs, collectives, autograd, training, compile, "
                        "hub, kernels, reliability, cuda, observability, scripts, instructions, opinfo")
    args = p.parse_args()
    from . import (
        autograd,
        collectives,
        compile,
        core,
        cuda,
        dataplane,
        hosts,
        hub,
        instructions,
        kernels,
        observability,
        opinfo,
        programs,
        reliability,
        scripts,
        training,
    )

    groups = {"core": core.run_all, "dataplane": dataplane.run_all, "hosts": hosts.run_all,
              "programs": programs.run_all, "collectives": collectives.run_all,
              "autograd": autograd.run_all, "training": training.run_all, "compile": compile.run_all,
              "hub": hub.run_all, "kernels": kernels.run_all, "reliability": reliability.run_all,
              "cuda": cuda.run_all, "observability": observability.run_all, "scripts": scripts.run_all,
              "instructions": instructions.run_all, "opinfo": opinfo.run_all}
    results = []
    for name, run in groups.items():
        if args.only in (None, name):
            results.extend(run())
    # (the workers inherit this process's environment: OPENBLAS_CORETYPE, where a host sets it, picks their kernels)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"the CPU workers' products: {describe()}")
    print(table(results))


if __name__ == "__main__":
    main()
