"""The tensor side of the hub: ``tw.hub.load_state_dict``, ``tw.hub.push`` (and ``tw.hub.load`` for models).

``load_state_dict`` reads only the safetensors *headers* over HTTP (Range requests) and records one
``hub_tensor`` op per tensor: the worker that owns the device downloads the file from the hub itself
(cached by sha256 on its host, hash verified) and maps the tensors into device memory. The client
receives handles only.
"""

from __future__ import annotations

import json
import os
import struct
import urllib.parse
import urllib.request

import numpy as np

from tensorwire import context, models, nn
from tensorwire.progress import sink_for
from tensorwire.protocol.hub.client import (
    _headers,
    _open,
    _token,
    default_endpoint,
    fetch,
    push_files,
    push_folder,
    read_body,
    resolve,
)
from tensorwire.protocol.hub.errors import EntryNotFound, Unauthorized
from tensorwire.protocol.safetensors_io import parse_header, save_bytes, tensor_specs
from tensorwire.tensor import device_name

MAX_HEADER = 100_000_000


def _session_endpoint(endpoint: str | None, session) -> str:
    """``endpoint``, else the hub URL the session learnt from the dispatcher, else the environment."""
    if endpoint:
        return endpoint
    if session is None:  # the session in use, if any (never connect just to find a URL)
        session = getattr(context._local, "session", None) or context._default
        if session is not None and session.closed:
            session = None
    if session is not None and getattr(session, "hub_url", None):
        return session.hub_url
    return default_endpoint(None)


def _check_cluster_hub(session, endpoint: str | None, repo_id: str) -> None:
    """Refuse a load the workers would refuse at first use: a cluster without a hub, or ``endpoint`` naming another
    hub than the one its workers download from (they never download from a hub a client names)."""
    cluster = getattr(session, "hub_url", None)
    how = ("start the cluster with one (LocalCluster(hub_root=DIR) or LocalCluster(hub_url=URL); tensorwire up "
           "--hub-root DIR or --hub-url URL; tensorwire worker --hub-url URL)")
    if not cluster:
        raise Unauthorized(f"cannot load {repo_id}: this cluster's workers have no hub to download from; {how}")
    if endpoint and endpoint.rstrip("/") != cluster.rstrip("/"):
        raise Unauthorized(f"cannot load {repo_id} from {endpoint}: this cluster's workers download from "
                           f"{cluster} only; push the model there, or {how}")


def _range(url: str, start: int, end: int, token: str | None) -> bytes:
    """Bytes ``start`` to ``end`` (inclusive) of the file at ``url``; ``HubUnavailable`` if the answer is cut off."""
    with _open(urllib.request.Request(url, headers=_headers(token, Range=f"bytes={start}-{end}")), 60.0) as resp:
        return read_body(resp, url, end - start + 1)


def remote_header(endpoint: str, repo_id: str, commit: str, path: str, token: str | None) -> dict:
    """The JSON header of a safetensors file on the hub, read with two small Range requests."""
    url = f"{endpoint.rstrip('/')}/{repo_id}/resolve/{commit}/{urllib.parse.quote(path)}"
    head = _range(url, 0, 7, token)
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER:
        raise ValueError(f"{path}: safetensors header of {n} bytes is too large")
    header, _ = parse_header(head + _range(url, 8, 8 + n - 1, token))
    return header


def load_state_dict(
    repo_id: str,
    revision: str = "main",
    *,
    device=None,
    endpoint: str | None = None,
    token: str | None = None,
    session=None,
    files: list[str] | None = None,
    progress=None,
) -> dict:
    """Tensors of every ``*.safetensors`` file of a hub repository, loaded by the worker of ``device``.

    Returns ``{name: tw.Tensor}``. The worker downloads each file from the cluster's hub itself (the one it was
    configured with; an ``endpoint`` naming another hub is refused with ``Unauthorized``); the bytes never pass
    through this process. ``token`` falls back to ``TENSORWIRE_HUB_TOKEN``; it is sent to the worker, which uses
    it only towards the cluster's hub.

    ``progress``: bars on stderr for the workers' downloads, drawn while this process waits for an answer (the
    tensors are lazy: the download runs when a value is needed). None (default): when stderr is a terminal; True:
    always; False: never; ``TENSORWIRE_PROGRESS=0`` turns bars off whatever the code says, ``=1`` on where the
    default applies. A callable gets each report (a ``tw.progress.DownloadProgress``) instead of bars. Downloads
    under ``TENSORWIRE_PROGRESS_MIN_BYTES`` (8 MiB) that end within a second, and files in a worker's cache, show
    nothing (docs/observability.md#progress).
    """
    s = session or context.current_session()
    _check_cluster_hub(s, endpoint, repo_id)
    ep = _session_endpoint(endpoint, s)
    tok = _token(token)
    meta = resolve(repo_id, revision, endpoint=ep, token=tok)
    commit = meta["commit"]
    names = files or sorted(f["path"] for f in meta["files"] if f["path"].endswith(".safetensors"))
    if not names:
        raise EntryNotFound(f"{repo_id}@{revision} has no .safetensors files")
    dev = s.default_device if device is None else s.check_device(device_name(device))
    sink = sink_for(progress)
    progress_id = s.watch_progress(sink) if sink is not None else None
    out = {}
    for path in names:
        header = remote_header(ep, repo_id, commit, path, tok)
        for name, (dt, shape, _, _) in tensor_specs(header).items():
            attrs = {
                "repo": repo_id,
                "commit": commit,
                "path": path,
                "name": name,
                "shape": list(shape),
                "dtype": dt.name,
            }
            if endpoint:  # the worker loads from the cluster's hub only; an explicit other one is refused there
                attrs["endpoint"] = endpoint
            if tok:
                attrs["token"] = tok
            if progress_id is not None:
                attrs["progress"] = progress_id
            out[name] = s.record("hub_tensor", [], attrs, dev)
    return out


def _state_dict_of(obj) -> dict:
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return obj.state_dict()
    if isinstance(obj, dict):
        return obj
    raise TypeError(f"push() expects a module with state_dict() or a dict of tensors, got {type(obj).__name__}")


def push(
    repo_id: str,
    obj,
    *,
    config: dict | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    revision: str = "main",
    message: str | None = None,
    private: bool = False,
    progress: bool = False,
    filename: str = "model.safetensors",
    session=None,
) -> str:
    """Push a live module, a state dict, or a folder in Hugging Face layout; returns the commit id.

    Modules and state dicts are written as ``model.safetensors`` (plus ``config.json`` from ``config``
    or the module's ``config`` attribute, when there is one).
    """
    ep = _session_endpoint(endpoint, session)
    if isinstance(obj, (str, os.PathLike)):
        return push_folder(
            repo_id,
            obj,
            endpoint=ep,
            token=token,
            revision=revision,
            message=message,
            private=private,
            progress=progress,
        )
    state = _state_dict_of(obj)
    arrays = {k: np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for k, v in state.items()}
    files: dict = {filename: save_bytes(arrays, {"format": "pt"})}
    cfg = config if config is not None else getattr(obj, "config", None)
    if hasattr(cfg, "to_dict"):
        cfg = cfg.to_dict()
    if cfg is not None:
        files["config.json"] = json.dumps(cfg, indent=2, sort_keys=True).encode()
    return push_files(
        repo_id, files, endpoint=ep, token=token, revision=revision, message=message, private=private, progress=progress
    )


def load(
    repo_id: str,
    revision: str = "main",
    *,
    device=None,
    endpoint: str | None = None,
    token: str | None = None,
    session=None,
    strict: bool = True,
    progress=None,
):
    """A ``tw.models`` model built from the repository's ``config.json`` with its weights, on ``device``.

    ``config.json``'s ``architectures``/``model_type`` chooses the class (``tw.models.for_config``); the
    weights are loaded by the worker that owns ``device`` straight from the hub (see
    :func:`load_state_dict`, whose ``progress`` this passes on), and the model is returned in eval mode.
    """
    s = session or context.current_session()
    _check_cluster_hub(s, endpoint, repo_id)
    ep = _session_endpoint(endpoint, s)
    tok = _token(token)
    commit = resolve(repo_id, revision, endpoint=ep, token=tok)["commit"]
    with open(fetch(repo_id, "config.json", revision=commit, endpoint=ep, token=tok)) as f:
        config = json.load(f)
    dev = s.default_device if device is None else s.check_device(device_name(device))
    prev = s.default_device
    s.default_device = dev  # build the parameters where they will live
    try:
        with nn.init.skip_init():  # the checkpoint overwrites every parameter
            model = models.for_config(config)
    finally:
        s.default_device = prev
    state = load_state_dict(repo_id, commit, device=dev, endpoint=ep, token=tok, session=s, progress=progress)
    own = set(model.state_dict())
    prefix = f"{config.get('model_type', '')}."
    if prefix != "." and not own & set(state) and any(k.startswith(prefix) for k in state):
        state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}  # a task head's checkpoint
    missing = sorted(own - set(state))
    if strict and missing:
        raise KeyError(
            f"{repo_id}@{revision}: the checkpoint lacks {len(missing)} of the model's tensors, e.g. {missing[:5]}"
        )
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    return model.eval()
