"""Peak memory of ``brain run`` when an LLM endpoint answers with 200 MB (issue 30, item 2),
or with an answer within the byte bound made of tiny JSON values (``{},{},…``).

Prints figures; asserts nothing.   .venv/bin/python bench/hostile_llm.py [MEGABYTES]

A one-step ``llm()`` workflow runs in a ``brain run`` subprocess against a server on
127.0.0.1 that answers, in turn: a normal small completion (the baseline); MEGABYTES (200)
announced with Content-Length; the same chunked, without a length; and the same gzip
-compressed to a few hundred KiB (a bomb); then answers of tiny values: just within the
limit on values (the most an answer may hold), and just within the byte bound (7 MiB:
millions of values), plain and gzipped (30 KB on the wire). For each, the child's peak resident memory (from
``wait4``'s rusage, so nothing in the child is changed), how much the server managed to send
before the client hung up, and the step's error. Target: every peak under 150 MB.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

MIB = 1 << 20
PREFIX = b'{"choices": [{"message": {"role": "assistant", "content": "'
SMALL = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hello"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
WORKFLOW = """\
from brain import llm, workflow


@workflow
def hostile():
    llm("ask", prompt="say hello", model="m")
"""


def blocks(total: int) -> Iterator[bytes]:
    """An answer's start, then ``a``s up to ``total`` bytes, made as it is sent."""
    yield PREFIX
    sent, block = len(PREFIX), b"a" * 65536
    while sent < total:
        part = block[:total - sent]
        sent += len(part)
        yield part


def tiny_values(units: int) -> bytes:
    """A small answer whose extra field holds ``units`` empty objects (``{},`` each)."""
    head = b'{"choices":[{"message":{"role":"assistant","content":"hi"}}],"x":['
    return head + b"{}," * units + b"0]}"


def gzipped(total: int) -> Iterator[bytes]:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for block in blocks(total):
        packed = packer.compress(block)
        if packed:
            yield packed
    yield packer.flush()


class Server:
    """Answers each POST with ``headers`` and what ``body()`` yields (chunked without a
    Content-Length); counts the body bytes the client took."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.headers: dict[str, str] = {}
        self.body: Callable[[], Iterator[bytes]] = lambda: iter([SMALL])
        self.sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                more = conn.recv(65536)
                if not more:
                    return
                head += more
            chunked = "Content-Length" not in self.headers
            lines = ["HTTP/1.1 200 OK", "Content-Type: application/json",
                     *(f"{k}: {v}" for k, v in self.headers.items())]
            if chunked:
                lines.append("Transfer-Encoding: chunked")
            try:
                conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
                for data in self.body():
                    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                    self.sent += len(data)
                if chunked:
                    conn.sendall(b"0\r\n\r\n")
            except OSError:
                pass


def brain_run(folder: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """``brain run`` of the workflow: its peak RSS in MB, seconds, and the step's end."""
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "brain.cli"]
    t0 = time.perf_counter()
    proc = subprocess.Popen([*argv, "run", str(folder / "hostile.py"), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = 0  # reaped by wait4
    try:
        step = json.loads(out)["steps"][0]
        end = step.get("error") or f"output {step.get('output')!r}"
    except (ValueError, KeyError, IndexError):
        end = out.decode(errors="replace")[:200]
    return usage.ru_maxrss / 1024, seconds, end


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    total = megabytes * MIB
    server = Server()
    cases: list[tuple[str, dict[str, str], Callable[[], Iterator[bytes]]]] = [
        ("normal small answer (baseline)", {"Content-Length": str(len(SMALL))},
         lambda: iter([SMALL])),
        (f"{megabytes} MB, Content-Length", {"Content-Length": str(total)}, lambda: blocks(total)),
        (f"{megabytes} MB, chunked", {}, lambda: blocks(total)),
        (f"{megabytes} MB gzip bomb", {"Content-Encoding": "gzip"}, lambda: gzipped(total)),
    ]
    from brain.executors.json_budget import structure_limit
    from brain.executors.llm_answer import answer_limit

    # {}, is two structural characters: the most a default step reads, and the byte bound.
    for label, units in (("tiny values at the value limit", structure_limit(MIB) // 2 - 8),
                         ("tiny values, 7 MiB", (answer_limit(MIB) - 128) // 3)):
        raw = tiny_values(units)
        packed = zlib.compress(raw, 9)
        cases += [(label, {"Content-Length": str(len(raw))}, functools.partial(iter, [raw])),
                  (label + ", deflated", {"Content-Length": str(len(packed)),
                                          "Content-Encoding": "deflate"},
                   functools.partial(iter, [packed]))]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "hostile.py").write_text(WORKFLOW)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
        env.update(BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{folder / 'brain.db'}",
                   LLM_BASE_URL=server.url)
        print("brain run, one llm() step (max_output_bytes 1 MiB), peak RSS of the child:")
        for label, headers, body in cases:
            server.headers, server.body, server.sent = headers, body, 0
            peak, seconds, end = brain_run(folder, env)
            print(f"  {label:40} peak {peak:6.1f} MB  {seconds:5.2f} s  server sent "
                  f"{server.sent / MIB:7.1f} MiB  -> {end[:110]}")
    print("target: every peak under 150 MB")


if __name__ == "__main__":
    main()
