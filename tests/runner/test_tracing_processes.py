"""Traces across processes (SPEC §25), with real processes configured only by the standard
``OTEL_*`` variables: a run killed with ``kill -9`` and resumed by another process is one
trace; with tracing off nothing of OpenTelemetry is imported; asked for without the
packages, a one-line message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from otlp_receiver import OtlpReceiver
from support import kill_group_quietly, sql_rows, wait_for, wait_for_file

ROOT = Path(__file__).resolve().parents[2]

FLOW = textwrap.dedent('''
    import asyncio, sys
    from pathlib import Path
    from brain import shell, step, workflow

    MARK = Path(__file__).with_name("second.started")

    @step
    def first() -> str:
        return "one"

    @workflow
    def crashy():
        first()
        # The first try marks and hangs (its executor is killed); the resumed one ends.
        shell("second", argv=["sh", "-c", 'if [ -f "$1" ]; then echo resumed; '
                              'else echo x > "$1"; exec sleep 60; fi', "sh", str(MARK)])

    if __name__ == "__main__":
        if sys.argv[1] == "start":
            crashy.run()
        else:
            from brain.runner import resume_run
            from brain.runner.tracing import process_tracing
            from brain.store import Store

            async def resume() -> None:
                store = Store()
                await store.open()
                try:
                    for _ in range(120):
                        if await resume_run(crashy, store, sys.argv[2]) is not None:
                            break
                        await asyncio.sleep(0.25)
                finally:
                    await store.close()
            asyncio.run(resume())
            process_tracing().force_flush()
''')


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "BRAIN_", "LLM_"))}
    env.update(BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/brain.db",
               BRAIN_LEASE_SECONDS="1", PYTHONPATH=str(ROOT), **more)
    return env


def test_a_run_resumed_after_kill_9_on_another_process_continues_its_trace(
        tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    with OtlpReceiver() as receiver:
        env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                   OTEL_BSP_SCHEDULE_DELAY="50", OTEL_SERVICE_NAME="brain-test")
        first = subprocess.Popen([sys.executable, str(flow), "start"], env=env,
                                 cwd=tmp_path, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for_file(tmp_path / "second.started", 30.0)
            before = receiver.wait_for("step first")[0]  # sent by the batch, before the kill
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
        finally:
            kill_group_quietly(first.pid)
        run_id = sql_rows(tmp_path, "SELECT id FROM brain_runs")[0]["id"]
        second = subprocess.run([sys.executable, str(flow), "resume", run_id], env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert sql_rows(tmp_path, "SELECT status FROM brain_runs")[0]["status"] == "succeeded"
        root = receiver.wait_for("invoke_workflow crashy")[0]
        after = wait_for(lambda: [s for s in receiver.named("step second")
                                  if s.attributes.get("brain.step.status") == "succeeded"],
                         15.0, "the resumed step's span")[0]
    assert before.trace_id == root.trace_id == after.trace_id
    assert before.parent_id == root.span_id == after.parent_id
    assert root.attributes["brain.run.id"] == run_id
    assert root.attributes["brain.run.status"] == "succeeded"
    assert root.service == "brain-test"
    # The root covers the whole run, from its first start (in the killed process).
    assert root.start <= before.start and root.end >= after.end


def test_tracing_off_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(textwrap.dedent('''
        import sys
        from brain import shell, step, workflow

        @step
        def work() -> str:
            return "done"

        @workflow
        def plain():
            shell("hi", argv=["true"])
            work()

        assert plain.run().status == "succeeded"
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        print("loaded:", loaded)
    '''))
    done = subprocess.run([sys.executable, str(flow)], env=_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: []"


def test_asked_for_without_the_packages_is_one_clear_line(tmp_path: Path) -> None:
    """``brain run`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set where the SDK cannot be
    imported (hidden here by a ``sitecustomize``): one line saying what to install."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nsys.modules['opentelemetry.sdk'] = None\n")
    flow = tmp_path / "flow.py"
    flow.write_text("from brain import shell, workflow\n\n"
                    "@workflow\ndef plain():\n    shell('hi', argv=['true'])\n")
    env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    env["PYTHONPATH"] = f"{hide}{os.pathsep}{ROOT}"
    brain = Path(sys.executable).with_name("brain")
    done = subprocess.run([str(brain), "run", str(flow)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert "the-brain[otel]" in done.stderr + done.stdout
    if (tmp_path / "brain.db").exists():  # nothing recorded: the run never started
        assert sql_rows(tmp_path, "SELECT id FROM brain_runs") == []
