"""The autograd service (placeholder until the backward-graph transform lands): registers and refuses."""

from __future__ import annotations

import argparse
import logging
import os

from tensorwire.protocol.errors import ServiceUnavailable
from tensorwire.protocol.named_service import NamedService
from tensorwire.protocol.service import stop_event_on_signals


class AutogradService(NamedService):
    name = "autograd"

    def handle(self, header: dict, frames: list):
        raise ServiceUnavailable("backward graphs are not implemented yet")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire autograd", description="Run the autograd service.")
    p.add_argument("--dispatcher", default=os.environ.get("TENSORWIRE_SERVICE_ADDRESS", "tcp://127.0.0.1:5556"))
    p.add_argument("--token", default=os.environ.get("TENSORWIRE_TOKEN"))
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TENSORWIRE_LOG", "WARNING"))
    svc = AutogradService(args.dispatcher, token=args.token)
    stop = stop_event_on_signals()
    import threading

    threading.Thread(target=lambda: (stop.wait(), svc.stop.set()), daemon=True).start()
    svc.serve()
    return 0
