"""`mpdoctor server`: the language server over stdio (mpdoctor.server), for editors. Its packages (pygls,
lsprotocol) come with the `[server]` extra; without them this is a one-line error."""

from __future__ import annotations

import sys

from mpdoctor.cli.exit_codes import EXIT_ERROR

_SERVER_PACKAGES = ("pygls", "lsprotocol", "cattrs", "attrs")


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "server",
        help="run the language server over stdio (editors: docs/editors.md)",
        description="A Language Server Protocol server over stdio: findings as you type, fixes as code actions, the "
        "rule's explanation on hover, the trace on save. Needs the [server] extra (pip install 'mpdoctor[server]').",
    )
    parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default and only transport)")
    parser.set_defaults(handler=run_server)


def run_server(args) -> int:
    try:
        from mpdoctor.server.app import serve
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in _SERVER_PACKAGES:
            raise
        print(f"mpdoctor: error: `mpdoctor server` needs {missing} (pip install 'mpdoctor[server]')", file=sys.stderr)
        return EXIT_ERROR
    return serve()
