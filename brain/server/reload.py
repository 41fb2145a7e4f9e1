"""``brain serve --reload``: reload workflow files when they change.

A changed file is imported again; if it breaks, its last good version stays
and the error is logged. A workflow that disappears loses its triggers, and
its queued runs fail with ``workflow not loaded``. Files are polled (mtime
and size) once a second: cheap, and it works on every filesystem.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from brain._errors import WorkflowLoadError

if TYPE_CHECKING:
    from brain.service import BrainService
    from brain.workflow import Workflow

log = logging.getLogger("brain.server")
run_log = logging.getLogger("brain.runs")
POLL_SECONDS = 1.0
NOT_LOADED = "workflow not loaded"


def _stamp(path: str) -> tuple[float, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime, st.st_size


class Reloader:
    """Watches the files behind ``paths`` and updates ``service`` when they change."""

    def __init__(self, service: BrainService, paths: list[str]) -> None:
        from brain.loader import workflow_files

        self.service = service
        self.paths = paths
        self.files = {os.path.abspath(f): _stamp(f) for f in workflow_files(paths)}
        self.by_file: dict[str, set[str]] = {}
        for name, wf in service.workflows.items():
            self.by_file.setdefault(wf.spec.source_file or "", set()).add(name)

    async def run(self) -> None:
        """Poll forever (until cancelled)."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.check()
            except Exception:
                log.exception("reload check failed")

    async def check(self) -> None:
        """Reload files that changed, appeared or vanished since the last check."""
        from brain.loader import workflow_files

        current = {os.path.abspath(f): _stamp(f)  # noqa: ASYNC240 - a few stat calls a second
                   for f in workflow_files(self.paths)}
        changed = [f for f in set(current) | set(self.files) if current.get(f) != self.files.get(f)]
        self.files = current
        for file in sorted(changed):
            await self._reload(file, exists=current.get(file) is not None)

    async def _reload(self, file: str, *, exists: bool) -> None:
        from brain.loader import load_file

        new: dict[str, Workflow] = {}
        if exists:
            try:
                # Off the event loop: a file's import may take its time (or even call this
                # server), and heartbeats, webhooks and the API must go on meanwhile.
                new = await asyncio.to_thread(load_file, file)
            except WorkflowLoadError as exc:
                log.error("reload: %s (keeping its last good version)", exc)
                return
        old_names = self.by_file.get(file, set())
        clash = [n for n in new if n in self.service.workflows and n not in old_names]
        if clash:
            log.error("reload: %s defines %s, already defined in another file; not loaded", file,
                      ", ".join(clash))
            return
        removed = {n: wf for n, wf in self.service.workflows.items()
                   if n in old_names and n not in new}
        workflows = {n: wf for n, wf in self.service.workflows.items() if n not in old_names}
        workflows.update(new)
        try:
            await self.service.replace_workflows(workflows)
        except WorkflowLoadError as exc:
            log.error("reload: %s (keeping its last good version)", exc)
            return
        for name, gone in removed.items():
            # Its queued runs fail now, and, like any failed run, queue its failure handlers.
            failed = await self.service.fail_queued_of_removed(gone, NOT_LOADED)
            for run_id in failed:
                run_log.warning("run %s of %s failed: %s", run_id, name, NOT_LOADED,
                                extra={"run_id": run_id, "workflow": name, "status": "failed"})
            log.warning("reload: workflow %s removed; %d queued runs failed", name, len(failed))
        self.by_file[file] = set(new)
        log.info("reloaded %s: %s", file, ", ".join(new) or "no workflows")
