"""Command line of the model hub: ``tensorwire hub ...`` (also ``python -m tensorwire.hub ...``).

::

    tensorwire hub --root DIR [--host 127.0.0.1] [--port 8700]      serve (the default command)
        [--max-connections 256] [--header-timeout 15] [--body-timeout 30]
    tensorwire hub serve --root DIR ...                              same, explicit
    tensorwire hub push DIR --repo R [--revision main] [--message M] [--private] [--token T] [--endpoint URL]
    tensorwire hub tag --repo R --tag T [--revision main] [--token T] [--endpoint URL]
    tensorwire hub ls [--endpoint URL] [--token T]
    tensorwire hub token create --root DIR [--name N] [--write | --scope write:acme --scope read:org/model ...]
        [--out FILE]

The endpoint defaults to ``$TENSORWIRE_HUB_URL`` then ``http://127.0.0.1:8700``; the token to
``$TENSORWIRE_HUB_TOKEN``. When serving, one line ``TENSORWIRE-READY {"service": "hub", "url": ...}``
is printed to stdout once the socket accepts connections.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tensorwire.protocol.addresses import is_address_in_use, port_in_use
from tensorwire.protocol.credentials import write_token_file
from tensorwire.protocol.errors import ConfigurationError
from tensorwire.protocol.hub.client import DEFAULT_PORT, create_tag, list_repos, push_folder
from tensorwire.protocol.hub.errors import HubError
from tensorwire.protocol.hub.storage import DEFAULT_MAX_BLOB, Storage, create_token
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.metrics import add_metrics_args

from .server import BODY_TIMEOUT, HEADER_TIMEOUT, MAX_CONNECTIONS, serve

_COMMANDS = ("serve", "push", "ls", "token", "tag")


def _serve_args(p: argparse.ArgumentParser) -> None:
    add_metrics_args(p)
    p.add_argument("--root", required=True, help="storage folder (blobs/ and index.sqlite)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port; 0 picks a free one (default {DEFAULT_PORT})"
    )
    p.add_argument("--max-blob-size", type=int, default=None, help="largest accepted file, in bytes")
    p.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    p.add_argument("--max-connections", type=int, default=None, help="connections open at once (default 256)")
    p.add_argument(
        "--header-timeout", type=float, default=None, help="seconds a connection may take to send a request head"
    )
    p.add_argument(
        "--body-timeout", type=float, default=None, help="seconds of silence allowed while a body is sent or read"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tensorwire hub", description="tensorwire model hub")
    sub = p.add_subparsers(dest="command")
    _serve_args(sub.add_parser("serve", help="run the hub server (default command)"))

    push = sub.add_parser("push", help="push a folder (Hugging Face layout) as a new revision")
    push.add_argument("folder")
    push.add_argument("--repo", required=True, help="repository id owner/name")
    push.add_argument("--revision", default="main", help="branch to commit to (default main)")
    push.add_argument("--message", default=None)
    push.add_argument("--private", action="store_true", help="create the repository private")
    push.add_argument("--token", default=None, help="write token (default $TENSORWIRE_HUB_TOKEN)")
    push.add_argument("--endpoint", default=None, help="hub URL (default $TENSORWIRE_HUB_URL or :8700)")
    push.add_argument("--no-progress", action="store_true")

    tag = sub.add_parser("tag", help="tag a revision")
    tag.add_argument("--repo", required=True)
    tag.add_argument("--tag", required=True)
    tag.add_argument("--revision", default="main")
    tag.add_argument("--token", default=None)
    tag.add_argument("--endpoint", default=None)

    ls = sub.add_parser("ls", help="list repositories")
    ls.add_argument("--endpoint", default=None)
    ls.add_argument("--token", default=None)

    token = sub.add_parser("token", help="manage API tokens")
    tsub = token.add_subparsers(dest="token_command")
    create = tsub.add_parser("create", help="create a token, print it once")
    create.add_argument("--root", required=True)
    create.add_argument("--name", default="default")
    create.add_argument("--write", action="store_true", help="allow pushes to every repository (default: read-only)")
    create.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="write the token to FILE (mode 0600) instead of printing it; a FILE holding a token this hub knows is "
        "kept, so a deployment's init step can run on every start",
    )
    create.add_argument(
        "--scope",
        action="append",
        default=None,
        metavar="ACCESS:NAME",
        help="fine-grained grant, repeatable: read:NAMESPACE, write:NAMESPACE, read:OWNER/REPO or write:OWNER/REPO "
        "(the token may then do only what its scopes grant)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``tensorwire hub`` with ``argv`` (without the ``hub`` word); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return _run(args, parser)
    except (HubError, ConfigurationError) as e:
        print(f"error: {e.code}: {e.message}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. the port is taken, the folder is not writable
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.command == "serve":
        configure_logging()
        try:
            return serve(
                args.root,
                args.host,
                args.port,
                max_blob_size=args.max_blob_size or DEFAULT_MAX_BLOB,
                quiet=args.quiet,
                max_connections=args.max_connections or MAX_CONNECTIONS,
                header_timeout=args.header_timeout or HEADER_TIMEOUT,
                body_timeout=args.body_timeout or BODY_TIMEOUT,
                metrics_port=args.metrics_port,
                metrics_host=args.metrics_host,
            )
        except OSError as e:
            if is_address_in_use(e):
                raise port_in_use("the hub", args.host, args.port, "--port") from None
            raise
    if args.command == "push":
        commit = push_folder(
            args.repo,
            args.folder,
            endpoint=args.endpoint,
            token=args.token,
            revision=args.revision,
            message=args.message,
            private=args.private,
            progress=not args.no_progress,
        )
        print(commit)
        return 0
    if args.command == "tag":
        print(create_tag(args.repo, args.tag, args.revision, endpoint=args.endpoint, token=args.token))
        return 0
    if args.command == "ls":
        for r in list_repos(args.endpoint, args.token):
            flags = "private" if r["private"] else "public"
            print(f"{r['repo_id']}\t{flags}\t{r['sha'] or '-'}\t{r['last_modified']}")
        return 0
    if args.command == "token" and args.token_command == "create":
        if args.scope and args.write:
            parser.error("--write and --scope exclude each other: a scoped token writes only where a write: scope says")
        if args.out:
            return _token_to_file(args)
        print(create_token(args.root, args.name, write=args.write, scopes=args.scope))
        return 0
    parser.print_help(sys.stderr)
    return 2


def _token_to_file(args: argparse.Namespace) -> int:
    """``token create --out FILE``: keep FILE if this hub knows its token, else create one and write it there."""
    out = Path(args.out)
    existing = out.read_text().strip() if out.is_file() else ""
    if existing and Storage(args.root).check_token(existing) is not None:
        print(f"kept the token in {out} (this hub knows it)")
        return 0
    write_token_file(out, create_token(args.root, args.name, write=args.write, scopes=args.scope))
    print(f"token written to {out} (readable by its owner only)")
    return 0
