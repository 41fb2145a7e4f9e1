"""Live step logs (SPEC §20) from a real ``brain serve``: a step's lines are seen while it
still runs over ``GET .../steps/{step}/log`` (plain and ``?follow=true``), as ``log``
events on ``GET /api/events`` and from ``brain logs --follow``; and ``brain run`` prints
them as they come.

"While it still runs" is shown without timing: the step prints a first line, then waits
for a file the test creates only after it has seen that line everywhere.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "live-logs-token-123456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

FLOWS = """
    from brain import shell, workflow

    @workflow
    def waits():
        shell("talk", command="echo first line; echo 'a warning' >&2; "
                              "while [ ! -e {marker} ]; do sleep 0.05; done; echo last line")
"""


def sse(url: str, out: list[tuple[str, dict[str, Any]]], stop: threading.Event,
        until: str | None = None) -> None:
    """Collect server-sent events from ``url`` until ``stop`` is set or ``until`` comes."""
    try:
        _collect(url, out, stop, until)
    except httpx.HTTPError:
        if not stop.is_set():  # the server stopping at the test's end ends the stream
            raise


def _collect(url: str, out: list[tuple[str, dict[str, Any]]], stop: threading.Event,
             until: str | None) -> None:
    with httpx.Client(timeout=60) as client, client.stream("GET", url, headers=AUTH) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if not line:
                event = None  # a message ends at a blank line
            elif line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event:
                out.append((event, json.loads(line.split(":", 1)[1])))
                # (without ``until``: the step's last line ends it)
                if event == until or stop.is_set() or (
                        until is None and event == "log" and "last line" in log_texts(out[-1:])):
                    return


def wait_for(predicate: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.05)


def log_texts(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [ln["text"] for e, d in events if e == "log" for ln in d["lines"]]


def test_a_running_steps_lines_reach_the_api_the_events_and_brain_logs(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    marker = tmp_path / "go-on"
    write_source(folder, "flows.py", FLOWS.replace("{marker}", str(marker)))
    env = clean_env(tmp_path / "brain.db", {"BRAIN_API_TOKEN": TOKEN})
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    stop = threading.Event()
    events: list[tuple[str, dict[str, Any]]] = []
    followed: list[tuple[str, dict[str, Any]]] = []
    try:
        server.wait_healthy()
        watcher = threading.Thread(target=sse, args=(f"{server.url}/api/events", events, stop))
        watcher.start()
        r = httpx.post(f"{server.url}/api/workflows/waits/runs", json={}, headers=AUTH)
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        log_url = f"{server.url}/api/runs/{run_id}/steps/talk/log"
        assert httpx.get(log_url, timeout=10).status_code == 401  # the token rules hold

        # 1. the plain answer, while the step waits
        def stored() -> list[str]:
            answer = httpx.get(log_url, headers=AUTH, timeout=10).json()
            return [ln["text"] for ln in answer["lines"]]
        wait_for(lambda: "first line" in stored(), "the first line over the API")
        answer = httpx.get(log_url, headers=AUTH, timeout=10).json()
        assert answer["status"] == "running"
        assert {(ln["stream"], ln["text"]) for ln in answer["lines"]} == {
            ("stdout", "first line"), ("stderr", "a warning")}
        after = httpx.get(log_url, params={"after": answer["next"]}, headers=AUTH,
                          timeout=10).json()
        assert after["lines"] == [] and after["next"] == answer["next"]

        # 2. the log event on /api/events, while the step waits
        wait_for(lambda: "first line" in log_texts(events), "a log event")
        (event,) = [d for e, d in events if e == "log" and "first line" in
                    [ln["text"] for ln in d["lines"]]]
        assert (event["run_id"], event["workflow"], event["step"]) == (run_id, "waits", "talk")

        # 3. ?follow=true, and brain logs --follow, both started while the step waits
        follower = threading.Thread(target=sse, args=(f"{log_url}?follow=true", followed, stop),
                                    kwargs={"until": "end"})
        follower.start()
        cli = subprocess.Popen([*brain_argv(), "logs", run_id[:10], "talk", "--follow"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
        assert cli.stdout is not None
        first = cli.stdout.readline()
        assert first.rstrip("\n") in ("talk | first line", "talk ! a warning"), first
        wait_for(lambda: "first line" in log_texts(followed), "the follower's first lines")
        assert not marker.exists()  # all of the above came while the step was still waiting

        marker.touch()
        rest = cli.stdout.read()  # (through the same buffer as the first line)
        assert cli.wait(60) == 0, cli.stderr.read() if cli.stderr else ""
        lines = [first.rstrip("\n"), *rest.splitlines()]
        assert sorted(lines) == ["talk ! a warning", "talk | first line", "talk | last line"]
        follower.join(60)
        assert not follower.is_alive()
        assert log_texts(followed)[-1] == "last line"
        assert followed[-1] == ("end", {"run_id": run_id, "step": "talk",
                                        "status": "succeeded"})
        wait_for(lambda: httpx.get(f"{server.url}/api/runs/{run_id}", headers=AUTH).json()[
            "status"] == "succeeded", "the run's end")
        watcher.join(60)  # it ends at the last line's event
        assert not watcher.is_alive() and "last line" in log_texts(events)
        # not found: a step the run does not have
        missing = httpx.get(f"{server.url}/api/runs/{run_id}/steps/nope/log", headers=AUTH)
        assert missing.status_code == 404 and "no step 'nope'" in missing.json()["detail"]
        assert httpx.get(log_url, params={"after": -1}, headers=AUTH).status_code == 400
    finally:
        stop.set()
        marker.touch()
        server.stop()


def test_brain_run_prints_each_line_as_its_step_writes_it(tmp_path: Path) -> None:
    marker = tmp_path / "go-on"
    write_source(tmp_path, "flows.py", FLOWS.replace("{marker}", str(marker)))
    env = clean_env(tmp_path / "brain.db")
    proc = subprocess.Popen([*brain_argv(), "run", "flows.py"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        while "talk | first line" not in seen:
            line = proc.stderr.readline()
            assert line, f"brain run ended first: {seen}"
            seen.append(line.rstrip("\n"))
        assert not marker.exists() and proc.poll() is None  # printed while the step waits
    finally:
        marker.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "talk | last line" in err.splitlines()

    quiet = subprocess.run([*brain_argv(), "run", "flows.py", "-q"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert "talk | " not in quiet.stderr + quiet.stdout
