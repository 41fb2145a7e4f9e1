"""Shell steps leave nothing of theirs open, and see no secret of another step."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from brain import secret, shell, workflow
from brain.store import Store


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_process_that_escaped_the_group_holds_no_pipe_of_ours(brain_db: Store):
    tag = f"{uuid.uuid4().int % 10**12:012d}"  # sleep 30.TAG: a valid time, found by pgrep

    @workflow(name=f"escape_{tag}")
    def escape():
        shell("bg", command=f"setsid sleep 30 {tag} >/dev/null 2>&1 </dev/null & "
                            f"setsid sh -c 'sleep 30; : {tag}' & echo started")

    escape.run(store=brain_db)  # warm up: the first run opens what every run shares
    before = _open_fds()
    for _ in range(3):
        r = escape.run(store=brain_db)
        assert r.succeeded, r.error
        assert r.steps["bg"].output == "started"
    try:
        assert _open_fds() <= before, "pipes to escaped processes stayed open"
    finally:
        subprocess.run(["pkill", "-f", tag], check=False)  # the test's own stray sleepers


def test_another_steps_secret_is_not_in_a_shell_environment(brain_db: Store,
                                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HYGIENE_DEPLOY_TOKEN", "deploy-token-value-1234")

    @workflow(name="secret_env")
    def secret_env():
        shell("deploy", argv=["true"], env={"TOKEN": secret("HYGIENE_DEPLOY_TOKEN")})
        shell("debug", command="env")

    r = secret_env.run(store=brain_db)
    assert r.succeeded, r.error
    assert "HYGIENE_DEPLOY_TOKEN" not in (r.steps["debug"].output or "")
    assert "deploy-token-value-1234" not in (r.steps["debug"].output or "")


def test_a_step_that_passes_the_secret_itself_gets_it(brain_db: Store,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path):
    monkeypatch.setenv("HYGIENE_OWN_TOKEN", "own-token-value-5678")
    out = tmp_path / "seen"

    @workflow(name="secret_own")
    def secret_own():
        shell("use", argv=["sh", "-c", f'printf %s "$HYGIENE_OWN_TOKEN" > {out}'],
              env={"HYGIENE_OWN_TOKEN": secret("HYGIENE_OWN_TOKEN")})

    r = secret_own.run(store=brain_db)
    assert r.succeeded, r.error
    assert out.read_text() == "own-token-value-5678"


def test_a_cancel_while_the_process_starts_stops_it_at_once() -> None:
    """A sibling's failure or a cancel can reach a step while asyncio is still starting its
    process. Wherever it lands, the cancel ends the step at once, and nothing the process
    started is left running (asyncio alone would wait for its children to close the
    pipes, here 30 s)."""
    import asyncio
    import time

    from brain.executors.shell import _start

    tag = uuid.uuid4().hex

    async def cancel_after(loops: int) -> float | None:
        started = asyncio.ensure_future(_start(
            ["/bin/sh", "-c", f"sleep 30.{tag} & wait"], stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True))
        for _ in range(loops):
            await asyncio.sleep(0)
        started.cancel()
        t0 = time.monotonic()
        try:
            proc = await started
        except asyncio.CancelledError:
            return time.monotonic() - t0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # it had started before the cancel: not this test's case
        await proc.wait()
        return None

    async def sweep() -> list[float | None]:
        return [await asyncio.wait_for(cancel_after(loops), 20) for loops in range(12)]

    try:
        waited = asyncio.run(sweep())
        # Each cancel ended within sweep()'s 20 s, before the child's 30 s sleep could have
        # ended: the cancel did not wait for it (pgrep below: it killed it).
        assert any(w is not None for w in waited)
        time.sleep(0.2)
        left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
        assert left.stdout == "", "a process started by a cancelled step is still running"
    finally:
        subprocess.run(["pkill", "-f", tag], check=False)
