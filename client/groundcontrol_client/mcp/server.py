"""`gctl mcp`: Ground Control as tools for a model, over stdio (the official `mcp` SDK).

The model never manages a lease: this server holds every claim and resource lease the session
takes and heartbeats them in the background for as long as the session lasts. The model sees a
lease only through what the tools answer: a denial is a plain sentence it can act on ("src/auth/
is held by hand b (fence 8), renewing; its current window ends in 40 s: wait, pick other work,
or escalate"), and a lost lease or a supervisor's directive is announced at the top of the next
answer. When the session ends, what it still holds is released.

Every tool says what it does and every parameter its meaning and range, so a model needs no
other instructions; arguments outside them are answered with a sentence naming the parameter
and what it takes, never with a validator's raw text.
"""

from __future__ import annotations

import functools
import signal
import sys
from typing import TYPE_CHECKING

import anyio

from groundcontrol_client.http import Client

if TYPE_CHECKING:
    from groundcontrol_client.mcp.proxy import WriteTool
from groundcontrol_client.mcp.session import Session
from groundcontrol_client.mcp.tools import build_server

# Re-exported: the tests build a server for a session from here, as before the split.
__all__ = ["Session", "build_server", "serve", "serve_wrapping"]


def serve(client: Client, *, process_id: str) -> None:
    """Serve on stdin/stdout until the client closes the session; then release what is held."""
    session = Session(client, process_id=process_id)
    # A host that ends the session with SIGTERM still gets what was held released.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        build_server(session).run("stdio")
    finally:
        session.close()


def serve_wrapping(
    client: Client,
    command: list[str],
    *,
    process_id: str,
    root: str | None = None,
    table: dict[str, WriteTool] | None = None,
    ttl_s: float = 120.0,
) -> int:
    """`gctl mcp --wrap -- CMD...`: serve CMD's tools beside Ground Control's (mcp_proxy) until
    the host ends the session (0) or CMD dies (1); then release what was held."""
    from groundcontrol_client.mcp import proxy as mcp_proxy

    session = Session(client, process_id=process_id)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return anyio.run(
            functools.partial(
                mcp_proxy.serve_wrapped, session, command, root=root, table=table, ttl_s=ttl_s
            )
        )
    finally:
        session.close()
