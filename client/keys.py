"""``tensorwire keys``: the CURVE key pairs and the service credential of a cluster across hosts (and, with
``--tokens``, the client and admin tokens), made by :func:`tensorwire.protocol.curve.create_keys`."""

from __future__ import annotations

import argparse

from tensorwire.protocol.credentials import ADMIN_TOKEN_FILE, CLIENT_TOKEN_FILE, ensure_token_file
from tensorwire.protocol.curve import create_keys


def main(argv: list[str]) -> int:
    """``tensorwire keys --dir DIR``: create or extend the keys directory; returns the exit status."""
    p = argparse.ArgumentParser(
        prog="tensorwire keys",
        description="Create a keys directory for a cluster across hosts: CURVE key pairs for the dispatcher, the "
                    "services and the clients, and the service credential (existing files are kept).")
    p.add_argument("--dir", required=True, help="the keys directory to create or extend")
    p.add_argument("--client", action="append", default=[], metavar="NAME",
                   help="also create (and authorise) the client pair NAME.key/NAME.key_secret (repeatable)")
    p.add_argument("--service", action="append", default=[], metavar="NAME",
                   help="also create (and authorise) the service pair NAME.key/NAME.key_secret (repeatable)")
    p.add_argument("--tokens", action="store_true",
                   help=f"also create the client token ({CLIENT_TOKEN_FILE}) and the admin token ({ADMIN_TOKEN_FILE}) "
                        "for the dispatcher's --token-file and --admin-token-file (existing ones are kept)")
    args = p.parse_args(argv)
    d = create_keys(args.dir, clients=("client", *args.client), services=("service", *args.service))
    print(f"keys in {d}:")
    if args.tokens:
        for name in (CLIENT_TOKEN_FILE, ADMIN_TOKEN_FILE):
            made = ensure_token_file(d / name)
            print(f"  {'created' if made else 'kept'} {d / name}")
    print(f"  dispatcher host: --keys {d}  (reads dispatcher.key_secret, clients/, services/)")
    print("  service hosts:   a directory with dispatcher.key, service.key_secret, service.token")
    print("  clients:         a directory with dispatcher.key, client.key_secret  (TENSORWIRE_KEYS=DIR)")
    return 0
