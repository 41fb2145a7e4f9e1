"""``brain serve --reload`` imports changed files off the event loop (SPEC §6): a file whose
import takes seconds does not stop the server answering meanwhile."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
from serve_support import brain_argv, clean_env
from support import free_port, wait_for, wait_healthy, write_source


def test_a_slow_import_does_not_stop_the_server(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "hello.py", '''
        from brain import shell, workflow

        @workflow
        def hello():
            shell("hi", command="echo hi")
    ''')
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*brain_argv(), "serve", str(folder), "--port", str(port),
                                 "--reload"], env=clean_env(tmp_path / "brain.db"), stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, url, log.read_text)
        write_source(folder, "slow.py", '''
            import time

            time.sleep(4)  # a slow import: a big library, a network call

            from brain import shell, workflow

            @workflow
            def slow():
                shell("hi", command="echo slow")
        ''')
        worst = 0.0
        with httpx.Client(timeout=10) as client:
            until = time.monotonic() + 5
            while time.monotonic() < until:
                started = time.monotonic()
                assert client.get(f"{url}/health").status_code == 200
                worst = max(worst, time.monotonic() - started)
                time.sleep(0.1)
        assert worst < 1.5, f"/health took {worst:.1f}s while a file was importing"
        wait_for(lambda: "reloaded" in log.read_text() and "slow" in log.read_text(), 20,
                 "the slow file to be loaded")
    finally:
        proc.terminate()
        proc.wait(30)
