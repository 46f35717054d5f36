"""``python -m benchmarks``: run every benchmark and print the table recorded in BENCHMARKS.md."""

from __future__ import annotations

import argparse
import os
import platform

from .harness import table


def main() -> None:
    p = argparse.ArgumentParser(description="tensorwire benchmarks (ratios against peers run side by side)")
    p.add_argument("--only", default=None,
                   help="run one group: core, collectives, autograd, training, hub, kernels, reliability, cuda")
    args = p.parse_args()
    from . import autograd, collectives, core, cuda, hub, kernels, reliability, training

    groups = {"core": core.run_all, "collectives": collectives.run_all, "autograd": autograd.run_all,
              "training": training.run_all, "hub": hub.run_all, "kernels": kernels.run_all,
              "reliability": reliability.run_all, "cuda": cuda.run_all}
    results = []
    for name, run in groups.items():
        if args.only in (None, name):
            results.extend(run())
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(table(results))


if __name__ == "__main__":
    main()
