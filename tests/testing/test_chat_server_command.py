"""``python -m brain.testing.chat_server``: the fake model endpoint started on its own, as
docs/testing.md and docs/llm.md show, answering a real ``brain run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import support


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "brain.testing.chat_server", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server says where it listens
    url = next(word for word in line.split() if word.startswith("http://"))
    return proc, url


def test_serves_until_sigterm_and_answers_a_brain_run(tmp_path: Path) -> None:
    proc, url = _start("--port", "0", "--reply", "hello from the fake")
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        answer = httpx.post(f"{url}/chat/completions",
                            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.json()["choices"][0]["message"]["content"] == "hello from the fake"
        flow = support.write_source(tmp_path, "flow.py", """
            from brain import llm, workflow

            @workflow
            def ask():
                llm("answer", prompt="say hi")
            """)
        env = {**os.environ, "LLM_BASE_URL": url, "LLM_MODEL": "fake",
               "BRAIN_DATABASE_URL": f"sqlite:///{tmp_path / 'brain.db'}"}
        done = subprocess.run([sys.executable, "-m", "brain.cli", "run", str(flow), "--json"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        run = json.loads(done.stdout)
        outputs = {step["name"]: step["output"] for step in run["steps"]}
        assert outputs == {"answer": "hello from the fake"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_port_in_use_is_a_clear_error() -> None:
    proc, url = _start("--port", "0")
    try:
        port = url.rsplit(":", 1)[1].split("/")[0]
        second = subprocess.run([sys.executable, "-m", "brain.testing.chat_server", "--port", port],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
