"""The tools of ``http_server.py`` over MCP's legacy HTTP+SSE transport: the event stream
at ``GET /sse``, messages posted to ``/messages/``.

Run as ``python tests/mcp_servers/sse_server.py --port 0``; it takes the same options
(bearer token, ``--fail-500``, ``--events``, ``--watch-stdin``) and prints its port first.
"""

from __future__ import annotations

if __name__ == "__main__":
    from http_server import main  # this script's folder is on sys.path

    main(transport="sse")
