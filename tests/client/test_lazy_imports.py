"""Issue 36: ``import tensorwire`` loads nothing heavy, so the services (submodules of the package) do not pay for the
client; ``import tensorwire as torch`` users still see every name (PEP 562 ``__getattr__`` and ``__dir__``).

Each check runs in a fresh interpreter: what a process has imported is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: the client's heavy modules: a service must not import any of them
CLIENT = ["tensorwire.session", "tensorwire.tensor", "tensorwire.nn", "tensorwire.models", "tensorwire.optim",
          "tensorwire.cluster", "tensorwire.creation", "tensorwire.functions", "tensorwire.jit", "tensorwire.utils"]


def _run(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _loaded_after(statement: str) -> list[str]:
    return _run(f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))")


def test_import_tensorwire_loads_nothing_else():
    loaded = _loaded_after("import tensorwire")
    assert [m for m in loaded if m.startswith("tensorwire.")] == []
    assert "numpy" not in loaded and "zmq" not in loaded


@pytest.mark.parametrize("service", ["tensorwire.dispatcher.server", "tensorwire.backends.worker",
                                     "tensorwire.autograd.service", "tensorwire.hub.server",
                                     "tensorwire.collectives.service", "tensorwire.cli"])
def test_a_service_does_not_import_the_client(service):
    loaded = set(_loaded_after(f"import {service}"))
    assert not loaded & set(CLIENT), sorted(loaded & set(CLIENT))


def test_every_public_name_is_there_and_listed():
    got = _run("""
import json
import tensorwire as tw
from tensorwire.functions import METHOD_FUNCTIONS
from tensorwire.legacy_types import __all__ as legacy
names = dir(tw)
missing = [n for n in tw.__all__ if not hasattr(tw, n)]
ns = {}
exec("from tensorwire import *", ns)
print(json.dumps({"missing": missing, "unlisted": [n for n in [*tw.__all__, *METHOD_FUNCTIONS] if n not in names],
                  "star": sorted(set(tw.__all__) - set(ns)), "legacy": sorted(set(legacy) - set(tw.__all__)),
                  "float32": repr(tw.float32), "bool": repr(tw.bool), "abs": tw.abs is METHOD_FUNCTIONS["abs"]}))
""")
    assert got["missing"] == [] and got["unlisted"] == [] and got["star"] == [] and got["legacy"] == []
    assert got["float32"] == "tensorwire.float32" and got["bool"] == "tensorwire.bool" and got["abs"]


def test_names_a_submodule_shares_keep_their_public_value_whatever_is_imported_first():
    """``tensorwire.tensor`` (a module) must not replace ``tw.tensor`` (the function), nor ``tensorwire.cancel`` the
    function ``tw.cancel``, nor ``tensorwire.ops`` the ``tw.ops`` namespace; ``tw.backends`` has torch's flags even
    when a worker's import of ``tensorwire.backends`` came first."""
    got = _run("""
import json
import tensorwire.backends, tensorwire.tensor, tensorwire.cancel, tensorwire.ops, tensorwire.nn
import tensorwire as tw
print(json.dumps({"tensor": type(tw.tensor).__name__, "cancel": type(tw.cancel).__name__,
                  "ops": type(tw.ops).__name__, "tf32": tw.backends.cuda.matmul.allow_tf32,
                  "mps": callable(tw.backends.mps.is_available), "cudnn": tw.backends.cudnn.enabled,
                  "Tensor": tw.Tensor.__module__}))
""")
    assert got == {"tensor": "function", "cancel": "function", "ops": "_Ops", "tf32": False, "mps": True,
                   "cudnn": True, "Tensor": "tensorwire.tensor"}


def test_torchs_backends_names_import_no_plugin_machinery():
    """``torch.backends.cuda.matmul.allow_tf32 = True`` in a PyTorch program is a flag, not a reason to load the
    compiled-device machinery: the cuda and mps packages register their backend class lazily (issue 32, item 2)."""
    loaded = _loaded_after("import tensorwire as tw\ntw.backends.cuda.matmul.allow_tf32 = True\n"
                           "tw.backends.cudnn.benchmark = True\nassert tw.backends.mps.is_built()")
    heavy = [m for m in loaded if m.startswith(("tensorwire.backends.compiled_device", "tensorwire.backends.codegen",
                                                "tensorwire.backends.cuda.", "tensorwire.backends.mps."))]
    assert heavy == [], heavy


def test_an_unknown_name_is_an_attribute_error():
    got = _run("""
import json
import tensorwire as tw
try:
    tw.no_such_name
    out = "no error"
except AttributeError as e:
    out = str(e)
print(json.dumps({"error": out}))
""")
    assert got["error"] == "module 'tensorwire' has no attribute 'no_such_name'"
