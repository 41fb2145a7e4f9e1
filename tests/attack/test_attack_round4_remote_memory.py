"""Attack round 4 (SPEC §2, §17, §18): memory while parsing what a remote endpoint answers.

The answers are cut at 7 MiB (6x ``max_output_bytes`` + 1 MiB), but that many bytes of JSON
made of tiny values (``[{},{},...]``, ``[0,0,...]``) become tens of millions of Python
objects once parsed:

- ``llm()``: a 7 MiB answer of ``{}`` values (30 KB on the wire when gzipped) peaked
  ``brain run`` at 256-266 MB (74 MB for a small answer); ``brain serve`` at 275 MB.
- ``mcp_tool(url=...)``: a 7 MB ``tools/call`` result whose ``_meta`` holds ``[{},{},...]``
  peaked ``brain run`` at 893 MB (``[0,0,...]``: 574 MB; 102 MB for a small answer);
  ``brain serve`` at 884 MB, with ``/health`` taking 1.5 s while it parsed.

The target is 150 MB whatever a remote endpoint sends. Each test runs ``brain run`` as a
child of a small launcher and reads its peak RSS from the launcher's ``RUSAGE_CHILDREN``.

Run: ``.venv/bin/pytest tests/attack/test_attack_round4_remote_memory.py -n 0``
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from serve_support import brain_argv, clean_env

LIMIT_MB = 150
SIZE = 7 * 1024 * 1024 - 64 * 1024


def _junk(head: bytes, tail: bytes, unit: bytes) -> bytes:
    return head + unit * ((SIZE - len(head) - len(tail)) // len(unit)) + b"0" + tail


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(405, b"", {})

    def do_DELETE(self) -> None:
        self._answer(200, b"", {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path.endswith("/chat/completions"):
            body = _junk(b'{"choices":[{"message":{"role":"assistant","content":"hi"}}],"x":[',
                         b"]}", b"{},")
            self._answer(200, gzip.compress(body), {"content-type": "application/json",
                                                    "content-encoding": "gzip"})
            return
        msg = json.loads(raw)
        if "id" not in msg:
            self._answer(202, b"", {})
            return
        if msg["method"] == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "junk", "version": "1"}}
            body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
        else:
            body = _junk(b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text",'
                         b'"text":"hi"}],"_meta":{"x":[' % json.dumps(msg["id"]).encode(),
                         b"]}}}", b"{},")
        self._answer(200, body, {"content-type": "application/json", "mcp-session-id": "s1"})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


#: Starts ``brain run`` from a small process and writes the child's peak RSS (KiB) to a file.
#: A child's peak counts the memory of the process it was forked from until it execs (Linux
#: folds the old address space's high-water mark in), so measured straight from a pytest
#: worker it would read the worker's size, not brain run's.
LAUNCHER = ("import resource, subprocess, sys; subprocess.call(sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage("
            "resource.RUSAGE_CHILDREN).ru_maxrss))")


def _peak_mb(tmp_path: Path, source: str) -> tuple[int, str]:
    (tmp_path / "flow.py").write_text(source)
    env = clean_env(tmp_path / "brain.db")
    peak = tmp_path / "peak.kib"
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(peak), *brain_argv(), "run",
                           str(tmp_path / "flow.py")], env=env, cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return int(peak.read_text()) // 1024, done.stdout.decode(errors="replace")


def test_llm_answer_of_tiny_json_values_stays_under_150_mb(server: str, tmp_path: Path) -> None:
    peak, out = _peak_mb(tmp_path, f'''
from brain import llm, workflow

@workflow
def junk():
    llm("ask", prompt="hi", model="m", provider_url="{server}/v1", timeout_seconds=60)
''')
    assert "succeeded" in out or "failed" in out, out
    assert peak < LIMIT_MB, f"brain run peaked at {peak} MB\n{out[-500:]}"


def test_mcp_answer_of_tiny_json_values_stays_under_150_mb(server: str, tmp_path: Path) -> None:
    peak, out = _peak_mb(tmp_path, f'''
from brain import mcp_tool, workflow

@workflow
def junk():
    mcp_tool("call", url="{server}/mcp", tool="t", args={{}}, timeout_seconds=60)
''')
    assert "succeeded" in out or "failed" in out, out
    assert peak < LIMIT_MB, f"brain run peaked at {peak} MB\n{out[-500:]}"
