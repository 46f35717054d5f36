"""The autograd service: a stateless transform from forward subgraphs to backward graphs.

Registered with the dispatcher as ``autograd``. Requests (msgpack header, no frames):

* ``{"op": "backward", "g": {...}}`` -> ``{"bw": {...}, "cached": bool}``: the backward graph of the
  forward graph ``g`` (wire forms in :mod:`tensorwire.autograd.backward_graph`). Replies are cached by the
  request's structural hash (sha256 of its canonical msgpack form), bounded LRU.
* ``{"op": "stats"}`` -> ``{"requests": n, "backward": n, "hits": n, "cached": n}``.

Nothing here touches tensor values: gradients are computed on the devices, by the batch the client
submits.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import threading
from collections import OrderedDict

import msgpack

from tensorwire.protocol.credentials import service_token
from tensorwire.protocol.curve import keys_dir
from tensorwire.protocol.errors import ProtocolError
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.named_service import NamedService, add_service_credential_args
from tensorwire.protocol.ops import load_plugin_ops
from tensorwire.protocol.service import stop_event_on_signals

from .backward_graph import build_backward

MAX_CACHE = int(os.environ.get("TENSORWIRE_AUTOGRAD_CACHE", "4096"))


class AutogradService(NamedService):
    name = "autograd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cache: OrderedDict[bytes, dict] = OrderedDict()
        self.stats = {"requests": 0, "backward": 0, "hits": 0}

    def info(self) -> dict:
        return {"ops": ["backward", "stats"]}

    def handle(self, header: dict, frames: list):
        self.stats["requests"] += 1
        op = header.get("op")
        if op == "stats":
            return {**self.stats, "cached": len(self.cache)}, []
        if op != "backward":
            raise ProtocolError(f"the autograd service does not know request {op!r}")
        self.stats["backward"] += 1
        g = header.get("g")
        key = hashlib.sha256(msgpack.packb(g, use_bin_type=True)).digest()
        bw = self.cache.get(key)
        if bw is not None:
            self.stats["hits"] += 1
            self.cache.move_to_end(key)
            return {"bw": bw, "cached": True}, []
        bw = build_backward(g)
        self.cache[key] = bw
        if len(self.cache) > MAX_CACHE:
            self.cache.popitem(last=False)
        return {"bw": bw, "cached": False}, []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire autograd", description="Run the autograd service.")
    p.add_argument("--dispatcher", default=os.environ.get("TENSORWIRE_SERVICE_ADDRESS", "tcp://127.0.0.1:5556"))
    add_service_credential_args(p)
    args = p.parse_args(argv)
    configure_logging()
    load_plugin_ops()  # custom ops of installed plugins: their VJP rules or decompositions differentiate them
    keys = keys_dir(args.keys)
    svc = AutogradService(args.dispatcher, token=service_token(args.service_token_file, keys), keys=keys)
    stop = stop_event_on_signals()
    threading.Thread(target=lambda: (stop.wait(), svc.stop.set()), daemon=True).start()
    svc.serve()
    return 0
