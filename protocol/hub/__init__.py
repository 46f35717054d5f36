"""What the model hub's parts share, below both the client and the hub package: its HTTP client (:mod:`.client`),
its typed errors (:mod:`.errors`), the rules for the names that cross it (:mod:`._validate`), the safetensors checks
(:mod:`.safetensors_check`) and its on-disk store (:mod:`.storage`, with :func:`~.storage.create_token`).

The client (``tensorwire.cluster``, ``tensorwire.progress``), the workers (``backends.hub_loader``) and the hub
service (``tensorwire.hub.server``, ``.cli``) import these modules; none of them imports the client's tensor code, so
the client depends on them and ``tensorwire.hub`` (whose ``load``/``load_state_dict``/``push`` need the client) on
the client, one way (docs/architecture.md, "Imports"). This package's own import loads nothing.
"""
