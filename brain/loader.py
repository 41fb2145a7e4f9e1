"""Import workflow files and find the workflows in them, with readable errors."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from brain._errors import WorkflowDefinitionError, WorkflowLoadError
from brain.workflow import Workflow

_SKIP_PREFIXES = ("_", "test_")


class _ExitedWhileImporting(BaseException):
    """Raised instead of ending the process when a file being imported calls ``os._exit``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


_real_exit = os._exit
_importing = threading.local()  # per thread: files being imported, and by which process
_guard_lock = threading.Lock()
_guard_users = 0


def _exit_unless_importing(status: int) -> NoReturn:
    """``os._exit`` while a workflow file is imported: in the importing thread of the
    importing process, an exception (the import fails with a message); anywhere else (a
    thread of its own, a forked child) the real thing."""
    if getattr(_importing, "depth", 0) and getattr(_importing, "pid", None) == os.getpid():
        raise _ExitedWhileImporting(status)
    _real_exit(status)


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """Within the block, ``os._exit`` called by this thread raises
    :class:`_ExitedWhileImporting` instead of ending the process (``sys.exit`` raises
    ``SystemExit`` anyway), so a file that exits while imported is an error, not a
    silent end of ``brain check`` with status 0."""
    global _guard_users
    with _guard_lock:
        if _guard_users == 0:
            os._exit = _exit_unless_importing
        _guard_users += 1
    _importing.depth = getattr(_importing, "depth", 0) + 1
    _importing.pid = os.getpid()
    try:
        yield
    finally:
        _importing.depth -= 1
        with _guard_lock:
            _guard_users -= 1
            if _guard_users == 0:
                os._exit = _real_exit


def _describe(path: str, exc: BaseException) -> str:
    """``path:line: Error: message``, pointing at the user's file, never a traceback."""
    if isinstance(exc, WorkflowDefinitionError):
        site = definition_site(exc)
        return f"{site[0]}:{site[1]}: {exc}" if site else f"{path}: {exc}"
    if isinstance(exc, SyntaxError):
        # No line for some (a NUL byte in the source): then the file alone.
        where = exc.filename or path
        return f"{where}:{exc.lineno}: SyntaxError: {exc.msg}" if exc.lineno \
            else f"{where}: SyntaxError: {exc.msg}"
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == path:
            line = frame.lineno
    where = f"{path}:{line}" if line else path
    if isinstance(exc, _ExitedWhileImporting | SystemExit):
        how = (f"os._exit({exc.status})" if isinstance(exc, _ExitedWhileImporting)
               else f"sys.exit({'' if exc.code is None else repr(exc.code)})")
        return (f"{where}: the file exited while being imported ({how}): a workflow file "
                f"must not end the process")
    return f"{where}: {type(exc).__name__}: {exc}"


_BRAIN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Frames that only pass a call on: the context managers of `with parallel():` and the like,
# and wrapt's wrapper of a @step function.
_PASS_THROUGH = (os.sep + "contextlib.py", os.sep + "wrapt" + os.sep)


def definition_site(exc: BaseException) -> tuple[str, int] | None:
    """``(file, line)`` of the user's code a definition error points at: the innermost
    call made outside The Brain (the helper call with a bad name or placeholder, the
    ``with`` that nests a block, the decorated function for what is checked once it is
    traced), or ``None`` when no such frame is known."""
    site = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if name.startswith(("<", _BRAIN_DIR)) or any(p in name for p in _PASS_THROUGH):
            continue
        if frame.lineno:
            site = (name, frame.lineno)
    return site


def load_file(path: str | os.PathLike[str]) -> dict[str, Workflow]:
    """Import a workflow file; return its workflows by name (in definition order)."""
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise WorkflowLoadError(f"{path}: no such file or folder" if not os.path.exists(full)
                                else f"{path}: not a workflow file")
    digest = hashlib.sha1(full.encode()).hexdigest()[:10]
    module_name = f"brain_workflows.{Path(full).stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, full)
    if spec is None or spec.loader is None:
        raise WorkflowLoadError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(full)
    sys.modules[module_name] = module
    sys.path.insert(0, folder)  # so the file can import its neighbours
    try:
        with _exit_refused():
            spec.loader.exec_module(module)
    except (Exception, SystemExit, _ExitedWhileImporting) as exc:
        sys.modules.pop(module_name, None)
        raise WorkflowLoadError(_describe(full, exc)) from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    found: dict[str, Workflow] = {}
    for value in vars(module).values():
        if isinstance(value, Workflow) and value.spec.source_file == full:
            found[value.name] = value
    return found


def load_target(target: str) -> Workflow:
    """``PATH`` or ``PATH:WORKFLOW`` → the one workflow it names.

    ``PATH`` is a workflow file, or a folder whose workflow files (see
    :func:`workflow_files`) hold exactly one workflow, or the one ``:WORKFLOW``
    names.
    """
    path, _, name = target.rpartition(":") if ":" in target and not os.path.exists(target) \
        else (target, "", "")
    if os.path.isdir(path):
        workflows = discover([path])
        if not workflows:
            raise WorkflowLoadError(f"{path}: no workflow in this folder's *.py files "
                                    "(skipping _*.py, test_*.py and conftest.py)")
        holds = "holds"
    else:
        workflows = load_file(path)
        if not workflows:
            raise WorkflowLoadError(f"{path}: defines no @workflow")
        holds = "defines"
    if name:
        if name not in workflows:
            raise WorkflowLoadError(f"{path}: no workflow {name!r} (it {holds} "
                                    f"{', '.join(workflows)})")
        return workflows[name]
    if len(workflows) > 1:
        raise WorkflowLoadError(f"{path} {holds} several workflows ({', '.join(workflows)}): "
                                f"pick one with {path}:NAME")
    return next(iter(workflows.values()))


def workflow_files(paths: list[str]) -> list[str]:
    """Files named, plus each folder's workflow files (see :func:`scan_folder`)."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += scan_folder(p)[0]
        else:
            files.append(p)
    return files


#: A workflow file imports The Brain, so its source has the word ``brain`` in it.
_MENTIONS_BRAIN = re.compile(rb"\bbrain\b")


def scan_folder(folder: str) -> tuple[list[str], list[str]]:
    """A folder's workflow files, and the ``*.py`` files passed over as not being any.

    Its ``*.py`` files, not recursive, skipping ``_*.py``, ``test_*.py`` and
    ``conftest.py`` (SPEC §6), and skipping — the second list — a file whose source
    never has the word ``brain`` in it (a server script, a helper that imports no
    Brain): it cannot define a workflow, and importing it could run it. A file
    named on its own is always imported.
    """
    files: list[str] = []
    skipped: list[str] = []
    for entry in sorted(os.listdir(folder)):
        if not entry.endswith(".py") or entry.startswith(_SKIP_PREFIXES) or entry == "conftest.py":
            continue
        path = os.path.join(folder, entry)
        if not os.path.isfile(path):
            continue
        (files if _mentions_brain(path) else skipped).append(path)
    return files, skipped


def _mentions_brain(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return _MENTIONS_BRAIN.search(f.read()) is not None
    except OSError:
        return True  # importing it says what is wrong


def discover(paths: list[str]) -> dict[str, Workflow]:
    """All workflows in ``paths`` by name; a duplicate name is an error naming both files."""
    found: dict[str, Workflow] = {}
    for file in workflow_files(paths):
        for name, wf in load_file(file).items():
            if name in found:
                raise WorkflowLoadError(f"workflow {name!r} is defined twice: in "
                                        f"{found[name].spec.source_file} and {wf.spec.source_file}")
            found[name] = wf
    return found
