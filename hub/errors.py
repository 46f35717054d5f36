"""The hub's typed errors, under the name the hub's documentation gives them (``tensorwire.hub.errors``).

They are defined in :mod:`tensorwire.protocol.hub.errors`, below both the client and this package (the client,
the workers and the hub's server raise and catch them); ``tensorwire.hub`` exports them too.
"""

from __future__ import annotations

from tensorwire.protocol.hub.errors import *  # noqa: F403 - the same names, listed once (protocol/hub/errors.py)
from tensorwire.protocol.hub.errors import __all__  # noqa: F401
