"""SPEC §24, seeing what a change would do: ``brain runs --stale`` lists the waiting runs the
workflows as loaded now would fail (with the step and what changed), ``brain check`` warns
about them when a database is at hand (and creates none to look), the console shows a
notice on such a run and every run page shows the version its run started and continued on;
an ended run's steps each offer "Retry from here"."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

from litestar.testing import AsyncTestClient
from support import write_source

from brain.loader import load_file
from brain.server import create_app
from brain.service import BrainService
from brain.store import Store

FLOW = '''
    from brain import approval, shell, workflow

    @workflow
    def deploy():
        shell("build", command="echo build-{build}")
        approval("go", prompt="ship?")
        shell("ship", command="echo ship-{ship}")

    @workflow
    def other():
        shell("build", command="echo build-{build}")
        approval("go", prompt="ship?")
        shell("ship", command="echo ship-{ship}")
'''
FINISHED = ("succeeded", "failed", "cancelled")
REASON = "workflow changed since the run started: step 'build' (command changed)"


def _write(folder: Path, deploy_build: str = "1", other_ship: str = "1") -> Path:
    text = FLOW.replace("{build}", deploy_build, 1).replace("{ship}", "1", 1)
    text = text.replace("{build}", "1").replace("{ship}", other_ship)
    return write_source(folder, "flows.py", text)


def _waiting_runs(folder: Path, db_url: str) -> tuple[str, str, str]:
    """A run of each workflow waiting for its approval, and an ended run of deploy."""
    workflows = load_file(_write(folder))

    async def go() -> tuple[str, str, str]:
        service = BrainService(workflows, store=Store(db_url), triggers=False)
        await service.start()
        try:
            api = service.api
            ended, _ = await api.start("deploy")
            waiting = {name: (await api.start(name))[0] for name in ("deploy", "other")}
            for _ in range(600):
                runs = [await api.run(i, with_steps=False) for i in (ended, *waiting.values())]
                if all(str(r.status) == "waiting" for r in runs):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the runs never all waited")
            await api.decide(ended, "go", approved=False)  # (its later step is skipped)
            for _ in range(600):
                if str((await api.run(ended, with_steps=False)).status) in FINISHED:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the rejected run never ended")
            return waiting["deploy"], waiting["other"], ended
        finally:
            await service.stop(grace_seconds=1)

    return asyncio.run(go())


def test_stale_runs_are_listed_warned_about_and_noticed(
        tmp_path: Path, brain_cmd: list[str], db_url: str) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    stale, fine, ended = _waiting_runs(folder, db_url)
    first = load_file(folder / "flows.py")["deploy"].version
    # deploy's build (it ran) changes; other's ship (not reached yet) changes
    path = _write(folder, deploy_build="2", other_ship="2")
    env = dict(os.environ)

    def brain(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, env=env,
                              timeout=60)

    listed = brain("runs", "--stale", str(folder), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["run_id"], r["stale"]) for r in json.loads(listed.stdout)] == [(stale, REASON)]

    checked = brain("check", str(folder))
    assert checked.returncode == 0, checked.stderr
    assert f"waiting run {stale[:12]} of deploy would fail" in checked.stderr
    assert fine[:12] not in checked.stderr + checked.stdout
    env["BRAIN_DATABASE_URL"] = f"sqlite:///{tmp_path / 'none.db'}"
    nowhere = brain("check", str(folder))
    assert nowhere.returncode == 0 and "would fail" not in nowhere.stderr
    assert not (tmp_path / "none.db").exists()  # no database made just to check
    env = dict(os.environ)

    shown = brain("show", stale)
    assert f"version: {first}" in shown.stdout

    async def pages() -> tuple[str, str, str]:
        async with AsyncTestClient(create_app(load_file(path)), base_url="http://127.0.0.1",
                                   timeout=60) as client:
            return tuple([(await client.get(f"/runs/{i}")).text  # type: ignore[return-value]
                          for i in (stale, fine, ended)])

    stale_page, fine_page, ended_page = asyncio.run(pages())
    assert 'id="run-stale"' in stale_page and "step &#39;build&#39; (command changed)" in stale_page
    assert 'id="run-stale"' not in fine_page
    assert f'<code class="version">{first}</code>' in fine_page
    assert ended_page.count('data-action="retry-from"') == 3
    assert 'data-action="retry-from"' not in stale_page  # a waiting run has not ended


def test_every_stale_run_is_found_however_many_pages(tmp_path: Path, db_url: str) -> None:
    """Seven waiting runs read two at a time: each of the five a change fails is found,
    newest first; the two of the unchanged workflow are not."""
    folder = tmp_path / "flows"
    folder.mkdir()
    workflows = load_file(_write(folder))

    async def go() -> tuple[list[str], list[str]]:
        service = BrainService(workflows, store=Store(db_url), triggers=False)
        await service.start()
        try:
            api = service.api
            started = [(await api.start(name))[0] for name in ["deploy"] * 5 + ["other"] * 2]
            for _ in range(600):
                runs = [await api.run(i, with_steps=False) for i in started]
                if all(str(r.status) == "waiting" for r in runs):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the runs never all waited")
            changed = load_file(_write(folder, deploy_build="2"))
            found = await api.stale(changed, page=2)
            assert {why for _, why in found} == {REASON}
            return [r.run_id for r, _ in found], started
        finally:
            await service.stop(grace_seconds=1)

    found, started = asyncio.run(go())
    assert found == started[:5][::-1]
