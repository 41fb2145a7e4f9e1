"""Attack (SPEC §16, §6): the command ``brain run`` prints to end a wait, for an odd key.

While a run waits in the foreground, ``brain run`` says how to end the wait, e.g.
``send it with `brain signal ci --key KEY --body TEXT```. The key is pasted in without shell
quoting (the console quotes the same command with ``shlex``). A key that comes from a
webhook or run body -- here ``main; touch PWNED`` -- turns the suggested command into two
commands: copying it runs ``touch PWNED`` (and sends the signal with the wrong key, ``main``,
so the wait is not even ended).

Promised: ``brain run`` waits "saying what they wait for and how to decide"; odd keys are
handled clearly and change nothing.

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_foreground_hint.py -n 0``
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from support import write_source

FLOW = '''
from brain import shell, trigger, wait_for, workflow


@workflow
def ci():
    got = wait_for("ci", signal="ci-done", key=trigger.body, timeout=1, default="none")
    shell("use", argv=["echo", f"{got}"])
'''

KEY = "main; touch PWNED"


def test_the_printed_signal_command_sends_the_waiting_key(tmp_path: Path,
                                                          brain_cmd: list[str]) -> None:
    write_source(tmp_path, "flow.py", FLOW)
    env = {**os.environ, "BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}",
           "COLUMNS": "400"}
    done = subprocess.run([*brain_cmd, "run", str(tmp_path / "flow.py"), "--body", KEY],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    said = done.stdout + done.stderr
    found = re.search(r"`(brain signal [^`]*)`", said)
    assert found, said
    command = found.group(1)
    words = shlex.split(command)
    assert words[:3] == ["brain", "signal", "ci-done"], command
    assert words[words.index("--key") + 1] == KEY, (
            f"brain run suggests `{command}`: a shell runs it as {command.split(';')[0]!r} "
            f"and then {command.split(';', 1)[1].strip()!r}")
