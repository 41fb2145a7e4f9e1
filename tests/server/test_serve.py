"""``brain serve`` start-up refusals (SPEC §6, §7): clear message, exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import write_source

HELLO = """
from brain import shell, workflow


@workflow
def hello():
    shell("hi", argv=["echo", "hi"])
"""


def run_brain(brain_cmd: list[str], *args: str, env: dict[str, str] | None = None,
              seconds: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([*brain_cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or os.environ.copy())
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"brain {' '.join(args)} did not exit (it is serving?)\n{out}\n{err}") \
            from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_public_host_without_token_is_refused(brain_cmd: list[str], tmp_path: Path, host: str) -> None:
    write_source(tmp_path, "hello.py", HELLO)
    result = run_brain(brain_cmd, "serve", str(tmp_path), "--host", host, "--port", "0")
    assert result.returncode == 2, result
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert "BRAIN_API_TOKEN" in output
    assert host in output


@pytest.mark.parametrize(("first", "second", "route"), [
    ('webhook(secret_env="A_SECRET", path="shared/hook")',
     'webhook(secret_env="B_SECRET", path="/shared/hook/")', "/hooks/shared/hook"),
    ('webhook(secret_env="A_SECRET")', 'webhook(secret_env="B_SECRET", path="alpha")', "/hooks/alpha"),
])
def test_duplicate_webhook_path_across_files(brain_cmd: list[str], tmp_path: Path, first: str,
                                             second: str, route: str) -> None:
    write_source(tmp_path, "a.py", f"""
        from brain import shell, webhook, workflow


        @workflow(triggers=[{first}])
        def alpha():
            shell("a", argv=["echo", "a"])
        """)
    write_source(tmp_path, "b.py", f"""
        from brain import shell, webhook, workflow


        @workflow(triggers=[{second}])
        def beta():
            shell("b", argv=["echo", "b"])
        """)
    result = run_brain(brain_cmd, "serve", str(tmp_path), "--port", "0")
    assert result.returncode == 2, result
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert route in output
    assert "alpha" in output and "beta" in output
