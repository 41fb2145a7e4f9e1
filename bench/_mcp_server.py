"""A one-tool MCP server for bench/mcp_step.py."""

from mcp.server import MCPServer

app = MCPServer("bench")


@app.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    app.run()
