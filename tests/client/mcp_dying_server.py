"""A tiny MCP server on stdio for `gctl mcp --wrap` tests: `echo` answers, `die` exits at once
(as a crashed server would, mid-call)."""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer(name="dying", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Answer the text."""
    return text


@server.tool()
def die() -> str:
    """Exit at once, without answering."""
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
