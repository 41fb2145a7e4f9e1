"""``brain serve --reload`` imports changed files off the event loop (SPEC §6): a file whose
import takes seconds does not stop the server answering meanwhile."""

from __future__ import annotations

from pathlib import Path

from serve_support import BrainServer, brain_argv, clean_env
from support import wait_for, write_source


def test_a_slow_import_does_not_stop_the_server(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "hello.py", '''
        from brain import shell, workflow

        @workflow
        def hello():
            shell("hi", command="echo hi")
    ''')
    with BrainServer(brain_argv(), folder, tmp_path, clean_env(tmp_path / "brain.db"),
                     extra_args=["--reload"]) as server:
        server.wait_healthy()
        importing, release = tmp_path / "importing", tmp_path / "release"
        write_source(folder, "slow.py", f'''
            import os, time

            # A slow import (a big library, a network call): it lasts until the test says.
            open({str(importing)!r}, "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
                time.sleep(0.02)

            from brain import shell, workflow

            @workflow
            def slow():
                shell("hi", command="echo slow")
        ''')
        wait_for(importing.exists, 30, "the reload to start importing slow.py")
        # The import is still under way (nothing released it): the server answers meanwhile.
        for _ in range(3):
            assert server.client.get("/health").status_code == 200
        assert "reloaded" not in server.output()
        release.touch()
        wait_for(lambda: "slow.py: slow" in server.output(), 30, "the slow file to be loaded")
