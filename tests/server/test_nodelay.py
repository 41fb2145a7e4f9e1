"""``brain serve``'s listening socket: every accepted connection sends without Nagle's delay.

Without TCP_NODELAY a response written in two parts (head, then body) waits for the
client's delayed ACK, about 40 ms, on every request of a kept-alive connection.
"""

from __future__ import annotations

import asyncio
import socket

from brain.cli.serve import ServeLoop, bind_socket


def test_connections_accepted_by_brain_serve_have_tcp_nodelay() -> None:
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Probe, sock=sock)
        try:
            for _ in range(3):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                await reader.read()  # the server closes it at once
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=ServeLoop) as runner:
        runner.run(main())
    assert seen == [1, 1, 1], seen
