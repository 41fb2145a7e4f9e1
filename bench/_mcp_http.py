"""A one-tool MCP server over streamable HTTP for bench/mcp_step.py, on a free loopback
port: ``python bench/_mcp_http.py`` prints the port as its first line, serves ``/mcp``,
and exits when its stdin ends (the bench that started it is gone)."""

import os
import socket
import sys
import threading

from mcp.server import MCPServer

app = MCPServer("bench-http", log_level="WARNING")


@app.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


def _exit_with_stdin() -> None:
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


if __name__ == "__main__":
    import uvicorn

    threading.Thread(target=_exit_with_stdin, daemon=True).start()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    os.dup2(2, 1)
    config = uvicorn.Config(app.streamable_http_app(), log_level="warning", access_log=False,
                            timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[sock])
