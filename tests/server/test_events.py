"""``GET /api/events``: run and step changes as server-sent events, from one watcher."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import AppServer
from support import write_source

from brain import shell, workflow
from brain.server.events import ChangeWatcher
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def read_events(url: str, headers: dict[str, str], out: list[tuple[str, dict[str, Any]]],
                until: str, ready: threading.Event) -> None:
    """Collect SSE events from ``url`` until a run event with status ``until`` arrives."""
    with httpx.Client(timeout=30) as client, client.stream("GET", url, headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if line.startswith(":"):
                ready.set()
            elif line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event:
                data = json.loads(line.split(":", 1)[1])
                out.append((event, data))
                if event == "run" and data["status"] == until:
                    return


def test_events_stream_a_runs_steps_to_scripts_with_the_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app served in this process (the API is the point, not the process)."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", """
        from brain import shell, workflow

        @workflow
        def steps3():
            a = shell("a", command="sleep 1.2; echo a")
            b = shell("b", argv=["echo", f"{a}b"])
            shell("c", argv=["echo", f"{b}c"])

        @workflow
        def other():
            shell("x", argv=["echo", "x"])
    """)
    monkeypatch.setenv("BRAIN_API_TOKEN", "events-token-123")
    auth = {"Authorization": "Bearer events-token-123"}
    with AppServer(folder) as server:
        assert httpx.get(f"{server.url}/api/events", timeout=10).status_code == 401
        got: list[tuple[str, dict[str, Any]]] = []
        ready = threading.Event()
        reader = threading.Thread(target=read_events, args=(
            f"{server.url}/api/events?workflow=steps3", auth, got, "succeeded", ready))
        reader.start()
        assert ready.wait(10)
        other = httpx.post(f"{server.url}/api/workflows/other/runs", json={}, headers=auth)
        r = httpx.post(f"{server.url}/api/workflows/steps3/runs", json={}, headers=auth)
        assert r.status_code == 202 and other.status_code == 202
        run_id = r.json()["run_id"]
        reader.join(30)
        assert not reader.is_alive()
    assert {d["run_id"] for _, d in got} == {run_id}, "the filter keeps other workflows out"
    steps = [(d["name"], d["status"]) for e, d in got if e == "step"]
    for name in "abc":
        assert (name, "succeeded") in steps
    ends = [steps.index((n, "succeeded")) for n in "abc"]
    assert ends == sorted(ends)
    assert ("a", "running") in steps  # a sleeps long enough to be seen running
    assert got[-1][0] == "run" and got[-1][1]["status"] == "succeeded"


def test_one_watcher_reads_the_database_for_every_listener(tmp_path: Path) -> None:
    """Ten listeners, one reader: the database is read by one look at a time (ten loops,
    one per listener, would read it side by side), once per look counted; each listener gets
    the whole run."""
    url = f"sqlite:///{tmp_path / 'watch.db'}"

    @workflow(name="watched")
    def watched() -> None:
        shell("one", command="sleep 0.6; echo one")

    async def go() -> tuple[int, list[list[str]], list[str]]:
        async with Store(url) as store:
            reads = {"now": 0, "most": 0, "all": 0}
            read = store.recent_activity

            async def counted(*args: Any, **kwargs: Any) -> Any:
                reads["now"] += 1
                reads["all"] += 1
                reads["most"] = max(reads["most"], reads["now"])
                try:
                    return await read(*args, **kwargs)
                finally:
                    reads["now"] -= 1

            store.recent_activity = counted  # type: ignore[method-assign]
            watcher = ChangeWatcher(store)
            runs: list[str] = []
            seen: list[list[str]] = [[] for _ in range(10)]

            async def listen(i: int, started: asyncio.Event) -> None:
                async with watcher.listen(workflow="watched") as listener:
                    started.set()
                    while True:
                        item = await asyncio.wait_for(listener.queue.get(), 20)
                        assert item is not None
                        event, data = item
                        seen[i].append(f"{event}:{data.get('name', '')}:{data['status']}")
                        if event == "run" and data["status"] == "succeeded":
                            return

            starts = [asyncio.Event() for _ in range(10)]
            tasks = [asyncio.create_task(listen(i, starts[i])) for i in range(10)]
            for s in starts:
                await s.wait()
            await asyncio.sleep(0.7)  # the first look only learns what exists
            result = await watched.arun(store=store)
            runs.append(result.run_id)
            await asyncio.gather(*tasks)
            looks = watcher.looks
            await watcher.close()
            assert reads["most"] == 1, reads  # never two reads at once
            assert 2 <= looks <= reads["all"], (looks, reads)  # a failed read is no look
            return looks, seen, runs

    _looks, seen, _ = asyncio.run(go())
    assert all(s == seen[0] for s in seen), seen
    assert "step:one:succeeded" in seen[0] and seen[0][-1] == "run::succeeded"
