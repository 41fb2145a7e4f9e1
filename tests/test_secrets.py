"""Secrets never reach what is stored (SPEC §11): any step's output, error or stderr, of
any step — not only the step that reads the secret — and steps cannot read them from the
orchestrator's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain import secret, shell, step, workflow
from brain._secrets import MIN_SECRET_LENGTH
from brain.store.memory import MemoryStore

REPO = Path(__file__).resolve().parent.parent


def _stored_text(result: object) -> str:
    return result.model_dump_json()  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                     min_size=MIN_SECRET_LENGTH, max_size=40),
       before=st.text(max_size=20), after=st.text(max_size=20))
def test_a_secret_is_scrubbed_from_every_steps_output_error_and_stderr(
        monkeypatch: pytest.MonkeyPatch, value: str, before: str, after: str) -> None:
    monkeypatch.setenv("SCRUB_TEST_TOKEN", value)

    @step
    def leak() -> str:  # another step that happens to see the value
        return before + os.environ["SCRUB_TEST_TOKEN"] + after

    @step
    def fail_with_it() -> str:
        raise RuntimeError("bad token " + os.environ["SCRUB_TEST_TOKEN"])

    @workflow(name="scrubbed")
    def scrubbed():
        leak()  # runs before the step that reads the secret
        shell("use", argv=["true"], env={"T": secret("SCRUB_TEST_TOKEN")})
        fail_with_it()

    r = scrubbed.run(store=MemoryStore())
    assert r.steps["use"].status == "succeeded"
    assert r.steps["fail_with_it"].status == "failed"
    assert value not in _stored_text(r)
    assert value not in (r.steps["leak"].output or "")
    assert "***" in (r.steps["leak"].output or "")


def test_a_secret_in_a_shell_steps_stderr_and_error_is_scrubbed(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SCRUB_SHELL_TOKEN", "shell-secret-0123456789")
    leaked = tmp_path / "leaked"
    leaked.write_text("shell-secret-0123456789")

    @workflow(name="scrub_shell")
    def scrub_shell():
        shell("use", argv=["true"], env={"T": secret("SCRUB_SHELL_TOKEN")})
        shell("echoes", command=f"cat {leaked}; cat {leaked} >&2; exit 3")

    r = scrub_shell.run(store=MemoryStore())
    assert r.status == "failed"
    assert "shell-secret-0123456789" not in _stored_text(r)
    assert "***" in (r.steps["echoes"].stderr or "")


@pytest.mark.parametrize("value", ["x", "abc", "1234567"])
def test_a_secret_too_short_to_scrub_fails_the_step_that_reads_it(monkeypatch: pytest.MonkeyPatch,
                                                                   value: str) -> None:
    monkeypatch.setenv("SHORT_TOKEN", value)

    @workflow(name="short_secret")
    def short_secret():
        shell("show", command="echo a b c x y z 123 abc")
        shell("use", argv=["true"], env={"T": secret("SHORT_TOKEN")})

    r = short_secret.run(store=MemoryStore())
    assert r.status == "failed"
    assert r.steps["show"].output == "a b c x y z 123 abc"  # not mangled by a one-letter secret
    error = r.steps["use"].error or ""
    assert "SHORT_TOKEN" in error and "8 characters" in error
    assert value not in error.replace("SHORT_TOKEN", "").replace("8 characters", "")


def test_the_orchestrator_environment_is_unreadable_from_a_step(tmp_path: Path) -> None:
    """A step runs as the orchestrator's user; ``/proc/$PPID/environ`` must not give it the
    variables that were kept out of its own environment. Run as an unprivileged user,
    since root reads any process's environment."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3.11").exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3.11 to run as another user")
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    folder = Path(tempfile.mkdtemp(prefix="brain-dump-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        script = folder / "probe.py"
        script.write_text(textwrap.dedent('''
            import sys
            import brain._secrets
            if sys.argv[1] == "control":
                brain._secrets.make_undumpable = lambda: None
            from brain import shell, workflow
            from brain.store.memory import MemoryStore

            @workflow(name="probe")
            def probe():
                shell("peek", command="tr '\\\\0' '\\\\n' < /proc/$PPID/environ || echo unreadable")

            r = probe.run(store=MemoryStore())
            print(r.steps["peek"].output)
        '''))
        script.chmod(0o644)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{site}",
               "BRAIN_PROBE_VALUE": "orchestrator-only-token-42", "HOME": str(folder)}

        def probe(mode: str) -> str:
            done = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "/usr/bin/python3.11", str(script), mode],
                env=env, cwd=folder, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr[-2000:]
            return done.stdout

        control = probe("control")
        if "orchestrator-only-token-42" not in control:
            pytest.skip(f"this machine hides /proc environ anyway: {control[-300:]}")
        assert "orchestrator-only-token-42" not in probe("real")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
