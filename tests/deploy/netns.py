"""Simulated hosts on one machine: network namespaces joined by veth links to a bridge in the root namespace.

Shared by the namespace test (``tests/deploy/test_namespaces.py``) and the data-plane benchmark across hosts
(``benchmarks/hosts.py``). Each host gets a namespace of its own, with loopback up and one address ``NET.N/24`` on
a veth link whose other end is on a bridge this module creates; optional ``tc netem`` on a host's link. Only the
namespaces, links and addresses made here see any traffic; everything is torn down on exit, whatever happened.
It needs root and iproute2's ``ip``: :class:`NetnsUnavailable` says why not elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from tensorwire.cluster import Service

#: the most seconds one ``ip``/``tc`` command may take
CMD_TIMEOUT_S = 30


class NetnsUnavailable(Exception):
    """Network namespaces cannot be made here (not root, no ``ip``, or the kernel refused); the message says which."""


def unavailable() -> str | None:
    """Why simulated hosts cannot be made on this machine, or None when they probably can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    return None


class Hosts:
    """Namespaces ``tw<tag><name>``, each with the address ``<net>.<octet>`` on a link to one bridge.

    ``hosts``: namespace name -> last octet of its address. ``netem``: name -> ``tc netem`` arguments for that host's
    link (``["delay", "1ms", "rate", "1gbit"]``; skipped without ``tc``). A context manager: entering creates
    everything (or raises :class:`NetnsUnavailable`, having removed what it made), leaving removes it.
    """

    def __init__(self, hosts: dict[str, int], net: str = "10.77.0", netem: dict[str, list[str]] | None = None,
                 tag: str | None = None):
        self.hosts = dict(hosts)
        self.net = net
        self.netem = dict(netem or {})
        self.tag = tag or uuid.uuid4().hex[:6]
        self.bridge = f"twbr{self.tag}"
        self._made: list[str] = []  # namespaces
        self._links: list[str] = []  # links in the root namespace (the bridge, the veths' host ends)

    # -- names -------------------------------------------------------------------------------------
    def ns(self, name: str) -> str:
        """Host ``name``'s namespace."""
        return f"tw{self.tag}{name}"

    def addr(self, name: str) -> str:
        """Host ``name``'s address."""
        return f"{self.net}.{self.hosts[name]}"

    def link(self, name: str) -> str:
        """Host ``name``'s end of its veth link (inside its namespace)."""
        return f"tw{self.tag}{self.hosts[name]}n"

    def argv(self, name: str, argv: list[str]) -> list[str]:
        """``argv`` run inside host ``name``'s namespace."""
        return ["ip", "netns", "exec", self.ns(name), *argv]

    def ip(self, *args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """``ip ARGS`` in the root namespace, or in host ``ns``'s."""
        cmd = ["ip", *(["netns", "exec", self.ns(ns), "ip"] if ns else []), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=check)

    # -- life --------------------------------------------------------------------------------------
    def __enter__(self) -> Hosts:
        why = unavailable()
        if why is not None:
            raise NetnsUnavailable(why)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        r = subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], capture_output=True, text=True,
                           timeout=CMD_TIMEOUT_S)
        if r.returncode != 0:
            raise NetnsUnavailable(f"cannot create a bridge here: {r.stderr.strip()}")
        self._links.append(self.bridge)
        self.ip("link", "set", self.bridge, "up")
        for name, octet in self.hosts.items():
            r = subprocess.run(["ip", "netns", "add", self.ns(name)], capture_output=True, text=True,
                               timeout=CMD_TIMEOUT_S)
            if r.returncode != 0:
                raise NetnsUnavailable(f"cannot create network namespaces here: {r.stderr.strip()}")
            self._made.append(self.ns(name))
            host_end, ns_end = f"tw{self.tag}{octet}h", self.link(name)
            self.ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            self._links.append(host_end)
            self.ip("link", "set", host_end, "master", self.bridge)
            self.ip("link", "set", host_end, "up")
            self.ip("link", "set", ns_end, "netns", self.ns(name))
            self.ip("addr", "add", f"{self.addr(name)}/24", "dev", ns_end, ns=name)
            self.ip("link", "set", ns_end, "up", ns=name)
            self.ip("link", "set", "lo", "up", ns=name)
            if name in self.netem and shutil.which("tc"):
                subprocess.run(self.argv(name, ["tc", "qdisc", "add", "dev", ns_end, "root", "netem",
                                                *self.netem[name]]), capture_output=True, timeout=CMD_TIMEOUT_S)

    def close(self) -> None:
        """Remove the namespaces and links made (their processes' sockets go with them); safe to call twice."""
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=CMD_TIMEOUT_S)
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=CMD_TIMEOUT_S)
        self._made, self._links = [], []

    # -- processes ---------------------------------------------------------------------------------
    def spawn(self, name: str, host: str, argv: list[str], log: Path, env: dict) -> Service:
        """Start service ``name`` (``argv``: a ``tensorwire.cli`` command line) inside host ``host``'s namespace,
        without waiting: several started side by side, then ``wait_ready`` on each, start in the time of the
        slowest."""
        return Service(name, self.argv(host, argv), log, env)

    def service(self, name: str, host: str, argv: list[str], log: Path, env: dict, ready_s: float = 120) -> Service:
        """:meth:`spawn`, then wait for its readiness line (at most ``ready_s``; never a sleep)."""
        svc = self.spawn(name, host, argv, log, env)
        try:
            svc.wait_ready(time.monotonic() + ready_s)
        except BaseException:
            svc.stop()
            raise
        return svc


def private_shm_argv(folder: Path, argv: list[str]) -> list[str]:
    """``argv`` with a private, empty tmpfs mounted over ``folder`` (the cluster's shared-memory folder): a process
    that sees none of the workers' shared memory, as on another machine. Without ``unshare``, ``argv`` as is."""
    if shutil.which("unshare") is None:
        return list(argv)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"',
            str(folder), *argv]
