"""The MCP server: the engine over the Model Context Protocol (the `mcp` extra)."""
