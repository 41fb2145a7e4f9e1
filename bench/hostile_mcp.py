"""Peak memory of ``brain run`` when a remote MCP server answers ``tools/call`` with 300 MB
(issue 30, target: under 150 MB), beside the same workflow against a normal answer.

The server is ``tests/mcp_servers/flood_server.py`` on loopback; each ``brain run`` is a
child process whose peak resident size comes from ``wait4`` (its own, not this script's).
Rows: a normal answer (1,000 characters), and 300 MB as one JSON body, as one SSE event,
and as endless notifications on the event stream, each with the default
``max_output_bytes`` (1 MiB: the step reads at most 7 MiB of an answer). Then answers
within the byte bound made of tiny JSON values (``"_meta": {"x": [{},{},…]}``), from a small
server in this script: just within the limit on values (the most a message may hold) and
the whole byte bound of them (7 MiB: millions of values), as JSON and as an event stream.

Prints figures; asserts nothing.   .venv/bin/python bench/hostile_mcp.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from brain.executors.json_budget import structure_limit
from brain.executors.mcp_remote import answer_bound

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "tests" / "mcp_servers" / "flood_server.py"
BRAIN = str(Path(sys.executable).parent / "brain")
HUGE = 300 * 1000 * 1000
ROWS = [("normal answer (1,000 chars)", "json", 1000),
        ("300 MB JSON body", "json", HUGE),
        ("300 MB in one SSE event", "sse", HUGE),
        ("endless notifications (SSE)", "flood", 0)]


MIB = 1 << 20
#: Tiny-value rows: label, framing, how many ``{},`` (two structural characters each).
TINY_ROWS = [("tiny values at the value limit (JSON)", "json", structure_limit(MIB) // 2 - 16),
             ("tiny values at the value limit (SSE)", "sse", structure_limit(MIB) // 2 - 16),
             ("tiny values, 7 MiB (JSON)", "json", (answer_bound(MIB) - 256) // 3),
             ("tiny values, 7 MiB (SSE)", "sse", (answer_bound(MIB) - 256) // 3)]


class TinyValues(BaseHTTPRequestHandler):
    """Just enough MCP over streamable HTTP: ``tools/call`` at ``/{framing}/{units}/mcp``
    answers a result whose ``_meta`` holds ``units`` empty objects."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.send_header("mcp-session-id", "s1")
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:  # the client stopped reading: what the bench is about
            self.close_connection = True

    def do_GET(self) -> None:
        self.send(405)

    def do_DELETE(self) -> None:
        self.send(200)

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["content-length"])))
        framing, units = self.path.split("/")[1:3]
        if "id" not in message:
            self.send(202)
            return
        head = b'{"jsonrpc":"2.0","id":%s,"result":' % json.dumps(message["id"]).encode()
        if message["method"] == "initialize":
            body = head + json.dumps({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1"}}).encode() + b"}"
        else:
            body = (head + b'{"content":[{"type":"text","text":"hi"}],"_meta":{"x":['
                    + b"{}," * int(units) + b"0]}}}")
        if framing == "sse" and message["method"] != "initialize":
            self.send(200, b"event: message\ndata: " + body + b"\n\n", "text/event-stream")
        else:
            self.send(200, body)


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--events",
                             str(folder / "events.jsonl"), "--watch-stdin"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline().split()[0])


def brain_run(folder: Path, url: str) -> tuple[float, float, str]:
    """Peak RSS (MB) and seconds of one ``brain run``, and how its step ended."""
    flow = folder / "flow.py"
    flow.write_text("from brain import mcp_tool, workflow\n\n\n@workflow\ndef hostile():\n"
                    f"    mcp_tool('call', url={url!r}, tool='big', timeout_seconds=120)\n")
    env = os.environ | {"BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'brain.db'}"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([BRAIN, "run", "--json", "-q", str(flow)], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    seconds = time.perf_counter() - t0
    try:
        (step,) = [s for s in json.loads(out)["steps"] if s["name"] == "call"]
        ended = step["status"] + (f": {step['error'][:90]}" if step.get("error") else "")
    except (ValueError, KeyError):
        ended = f"no run JSON: {out[:90]!r}"
    return usage.ru_maxrss / 1024, seconds, ended


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="brain-bench-hostile-") as tmp:
        folder = Path(tmp)
        server, port = start_server(folder)
        try:
            print(f"{'answer':40} {'peak RSS':>9} {'time':>7}  step")
            for i, (label, mode, size) in enumerate(ROWS):
                url = f"http://127.0.0.1:{port}/{mode}/{size}/ascii/row{i}/mcp"
                rss, seconds, ended = brain_run(folder, url)
                print(f"{label:40} {rss:7.0f} MB {seconds:6.1f}s  {ended}")
            tiny = ThreadingHTTPServer(("127.0.0.1", 0), TinyValues)
            tiny.daemon_threads = True
            threading.Thread(target=tiny.serve_forever, daemon=True).start()
            try:
                for label, framing, units in TINY_ROWS:
                    url = f"http://127.0.0.1:{tiny.server_address[1]}/{framing}/{units}/mcp"
                    rss, seconds, ended = brain_run(folder, url)
                    print(f"{label:40} {rss:7.0f} MB {seconds:6.1f}s  {ended}")
            finally:
                tiny.shutdown()
                tiny.server_close()
            print("target: every peak under 150 MB")
            sent = [json.loads(line) for line in
                    (folder / "events.jsonl").read_text().splitlines()]
            print("\nbytes the server handed over before the client went away "
                  "(socket buffers included):")
            for event in sent:
                print(f"  {event['tag']}: {event['sent'] / 1e6:.1f} MB"
                      f"{'' if event['complete'] else ' (cut)'}")
        finally:
            if server.stdin is not None:
                server.stdin.close()
            server.wait(10)


if __name__ == "__main__":
    main()
