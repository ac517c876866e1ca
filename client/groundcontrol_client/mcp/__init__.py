"""Ground Control as MCP tools: `gctl mcp` (`server`, `tools`, `session`) and `gctl mcp --wrap`,
which leases the writes of another server's tools (`proxy`)."""
