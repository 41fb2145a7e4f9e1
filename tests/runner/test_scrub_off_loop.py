"""A long output is scrubbed of secrets on a worker thread, not on the event loop: a step
printing megabytes must not hold up the server's other runs and its ``/health``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from brain import secret, shell, workflow
from brain.runner import texts

SECRET = "s3cret-value-for-the-scrub-test-0123456789"


@workflow
def loud():
    # 400 KiB of lines, the secret among them: a long output to scrub before it is stored.
    shell("print", command="i=0; while [ $i -lt 4000 ]; do "
                           "echo \"line $i $TOK padding padding padding padding padding\"; "
                           "i=$((i+1)); done",
          env={"TOK": secret("BRAIN_TEST_SCRUB_TOKEN")}, max_output_bytes=4 * 1024 * 1024)


def test_a_long_output_is_scrubbed_off_the_loop(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_TEST_SCRUB_TOKEN", SECRET)
    seen: list[tuple[int, bool]] = []  # (length, on the loop's thread)
    real = texts.scrub

    def watched(text: str | None, extra: object = ()) -> str | None:
        loop_thread = threading.main_thread() is threading.current_thread()
        seen.append((len(text or ""), loop_thread))
        return real(text, extra)  # type: ignore[arg-type]

    monkeypatch.setattr(texts, "scrub", watched)
    result = asyncio.run(loud.arun(store=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"))
    assert result.succeeded, result.error
    output = result.steps["print"].output or ""
    assert output.count("\n") == 3999 and SECRET not in output and "line 3999 ***" in output
    long_ones = [on_loop for length, on_loop in seen if length > texts.APART_ABOVE]
    assert long_ones, "the long output was never scrubbed through brain.runner.texts"
    assert not any(long_ones), "a long output was scrubbed on the event loop's thread"
