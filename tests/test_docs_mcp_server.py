"""docs/mcp.md's remote server example, run as written (its port aside): a real SDK server
over streamable HTTP, called by a real ``brain run`` step and listed by ``brain mcp tools``."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import support

REPO = Path(__file__).resolve().parents[1]


def _example() -> str:
    text = (REPO / "docs" / "mcp.md").read_text()
    found = re.search(r"```python\n(# tickets_server\.py.*?)```", text, re.S)
    assert found, "docs/mcp.md lost its remote server example"
    return found.group(1)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_documented_remote_server_answers_a_step(tmp_path: Path) -> None:
    port = support.free_port()
    source = _example()
    assert "port=8765" in source
    (tmp_path / "tickets_server.py").write_text(source.replace("port=8765", f"port={port}"))
    server = subprocess.Popen([sys.executable, "tickets_server.py"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        support.wait_for(lambda: _listening(port) or server.poll() is not None, 60,
                         "the example server to listen")
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        url = f"http://127.0.0.1:{port}/mcp"
        flow = support.write_source(tmp_path, "flow.py", f"""
            from brain import mcp_tool, trigger, workflow

            @workflow
            def report():
                mcp_tool("ticket", url="{url}", tool="open_ticket",
                         args={{"title": trigger.body, "priority": 1}})
            """)
        env = {**os.environ, "BRAIN_DATABASE_URL": f"sqlite:///{tmp_path / 'brain.db'}"}
        done = subprocess.run([sys.executable, "-m", "brain.cli", "run", str(flow),
                               "--body", "disk full", "--json"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs = {step["name"]: step["output"] for step in json.loads(done.stdout)["steps"]}
        assert outputs == {"ticket": "opened 'disk full' with priority 1"}
        listed = subprocess.run([sys.executable, "-m", "brain.cli", "mcp", "tools", "--url", url],
                                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert "open_ticket" in listed.stdout
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_user_docs_do_not_cite_spec_sections() -> None:
    """User docs speak for themselves: no "§N" of a spec a reader does not have (the design
    notes, docs/decisions.md and docs/architecture.md, are written for maintainers)."""
    for doc in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        if doc.name in {"decisions.md", "architecture.md"}:
            continue
        lines = [n for n, line in enumerate(doc.read_text().splitlines(), 1) if "§" in line]
        assert not lines, f"{doc.name} cites spec sections on lines {lines}"
