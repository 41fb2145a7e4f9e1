"""Attack (SPEC §7, §11, §13, §17, §20): through a real ``brain serve``, a hostile MCP server
echoes the credentials it is sent into the tool output, the structured content, the
progress messages and an ``isError`` text; none of it may reach an API answer
(``GET /api/runs/{id}``, the step's log, ``GET /api/events`` while the run goes on), the
console's run page, or the server's own log.

Holds, for the spellings the scrubber promises (the ones it misses are
``test_attack_remote_mcp_secrets.py``'s finding 1: they reach these answers the same way).

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_serve.py``
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

sys.path.append(str(Path(__file__).resolve().parent))
from test_attack_remote_mcp_hostile import HostileMcp, safe_forms

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

API_TOKEN = "atk-api-token-5b7d9f1e3a"
BEARER = "atk-bearer+tok/en-8c2e4a6b0d"
API_KEY = "atk-key'\"<&>-1f3b5d7e9a"
SECRETS = {"bearer": BEARER, "x-api-key": API_KEY}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[BrainServer, HostileMcp]]:
    with HostileMcp() as hostile:
        folder = tmp_path / "flows"
        folder.mkdir()
        creds = 'bearer=secret("ATK_BEARER"), headers={"X-Api-Key": secret("ATK_KEY")}'
        write_source(folder, "flows.py", f'''
            from brain import mcp_tool, parallel, secret, workflow

            @workflow
            def atk_serve_echo():
                with parallel():
                    mcp_tool("out", url={hostile.url("tool", "bearer", "safe")!r}, tool="t",
                             {creds})
                    mcp_tool("structured", url={hostile.url("structured", "x-api-key", "safe")!r},
                             tool="t", {creds})
                    mcp_tool("progress", url={hostile.url("progress", "bearer", "safe")!r},
                             tool="t", {creds})

            @workflow
            def atk_serve_refused():
                mcp_tool("call", url={hostile.url("iserror", "x-api-key", "safe")!r}, tool="t",
                         {creds})
        ''')
        env = clean_env(tmp_path / "brain.db", {"BRAIN_API_TOKEN": API_TOKEN,
                                                 "ATK_BEARER": BEARER, "ATK_KEY": API_KEY})
        server = BrainServer(brain_argv(), folder, tmp_path, env)
        try:
            server.wait_healthy()
            server.client.headers["Authorization"] = f"Bearer {API_TOKEN}"
            yield server, hostile
        finally:
            server.kill()
            server.stop()


def events_until_ended(url: str, out: list[str], ready: threading.Event) -> None:
    """Collect the raw lines of ``GET /api/events`` until a run event says it ended."""
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(timeout=30) as client, client.stream("GET", url, headers=headers) as r:
        assert r.status_code == 200
        event = None
        for line in r.iter_lines():
            out.append(line)
            if line.startswith(":"):
                ready.set()
            elif line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "run":
                if json.loads(line.split(":", 1)[1])["status"] in ("succeeded", "failed"):
                    return


def leaked(text: str) -> dict[str, list[str]]:
    found = {}
    for label, value in SECRETS.items():
        forms = [f for f in safe_forms(value)[:11] if f in text]
        if forms:
            found[label] = forms
    return found


def test_what_a_hostile_server_echoes_reaches_no_api_answer_console_page_or_log(
        served: tuple[BrainServer, HostileMcp]) -> None:
    server, hostile = served
    answers: dict[str, str] = {}
    for name in ("atk_serve_echo", "atk_serve_refused"):
        lines: list[str] = []
        ready = threading.Event()
        reader = threading.Thread(target=events_until_ended, daemon=True, args=(
            f"{server.url}/api/events?workflow={name}", lines, ready))
        reader.start()
        assert ready.wait(30), "the event stream never opened"
        run_id = server.start_run(name)
        run = server.wait_run(run_id, 30)
        reader.join(30)
        answers[f"{name} events"] = "\n".join(lines)
        answers[f"{name} run"] = json.dumps(run, ensure_ascii=False)
        for step in run["steps"]:
            log = server.client.get(f"/api/runs/{run_id}/steps/{step['name']}/log")
            assert log.status_code == 200, log.text
            answers[f"{name} log {step['name']}"] = log.text
        with httpx.Client(base_url=server.url, timeout=30) as browser:
            assert browser.get(f"/?token={API_TOKEN}").status_code in (200, 303)
            page = browser.get(f"/runs/{run_id}")
            assert page.status_code == 200 and run_id in page.text
            assert "***" in page.text  # the scrubbed echo is on the page
            answers[f"{name} console"] = page.text
        if name == "atk_serve_echo":
            assert run["status"] == "succeeded", run
            progress = next(s for s in run["steps"] if s["name"] == "progress")["progress"]
            assert progress and "***" in progress["message"], progress
            assert any("event: progress" in line for line in lines), lines[:20]
        else:
            assert run["status"] == "failed" and "denied ***" in run["error"], run["error"]
    answers["server log"] = server.output()
    # The server did get the secrets (so what is scrubbed was there to scrub).
    sent = [q["headers"] for q in hostile.seen()]
    assert any(h.get("authorization") == f"Bearer {BEARER}" for h in sent)
    problems = {where: found for where, text in answers.items() if (found := leaked(text))}
    assert problems == {}
