"""A one-tool stdio MCP server for bench/mcp_step.py that takes 2 s to start (a server
that loads a model or an index first): it sleeps before it reads or answers anything."""

import sys
import time

if __name__ == "__main__":
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
    from mcp.server import MCPServer

    app = MCPServer("bench-slow-start")

    @app.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    app.run()
