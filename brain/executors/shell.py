"""Shell steps: ``/bin/sh -c`` or a bare argv, in a process group of their own.

The step ends when the shell exits; the group is then killed (SIGTERM, then
SIGKILL after 2 s), so a background child that keeps stdout open cannot hang
it. A timeout or cancel kills the group at once. The group is announced to the
runner as soon as it starts (``StepContext.on_process``), which records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable, Sequence
from typing import Any

from brain._errors import StepFailed
from brain.dsl.model import ShellStepSpec
from brain.executors.base import (
    PreparedStep,
    Resolve,
    StepContext,
    StepOutput,
    cut,
    head_text,
    resolve_values,
    run_marker,
    tail_margin,
    tail_text,
)
from brain.executors.process import (
    KILL_GRACE_SECONDS,
    announce_group,
    gated,
    group_alive,
    kill_group,
    signal_group,
)
from brain.executors.steplog import StepLog

_SECRET_PREFIXES = ("BRAIN_", "THE_BRAIN_")
#: How much one read of a step's pipe may take.
_READ_BYTES = 1 << 20
#: A read smaller than this waits :data:`_GATHER_SECONDS` before the next.
_GULP_BYTES = 1 << 16
_GATHER_SECONDS = 0.002
_SECRET_NAMES = frozenset({"LLM_API_KEY"})


def child_environment(protected: frozenset[str], extra: dict[str, str]) -> dict[str, str]:
    """The orchestrator's environment minus its own secrets, with ``extra`` merged over it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_SECRET_PREFIXES) and k not in _SECRET_NAMES and k not in protected}
    env.update(extra)
    return env


class ShellExecutor:
    """Runs ``shell()`` steps."""

    kind = "shell"

    def prepare(self, spec: ShellStepSpec, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Fill in command (shell-quoted unless ``quote=False``), argv, stdin and env."""
        inputs: dict[str, Any] = {}
        payload: dict[str, Any] = {}
        secrets: list[str] = []
        if spec.command is not None:
            payload["command"] = inputs["command"] = resolve(spec.command, spec.quote)
        else:
            payload["argv"] = [resolve(a, False) for a in spec.argv or ()]
            inputs["argv"] = list(payload["argv"])
        if spec.stdin is not None:
            payload["stdin"] = inputs["stdin"] = resolve(spec.stdin, False)
        env, shown_env = resolve_values(spec.env, resolve, secrets, mocked=mocked)
        payload["env"] = env
        if shown_env:
            inputs["env"] = shown_env
        if spec.cwd is not None:
            inputs["cwd"] = spec.cwd
        return PreparedStep(inputs=inputs, payload=payload, secrets=secrets)

    async def execute(self, spec: ShellStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Run the process; stdout (trailing newlines removed) is the output."""
        payload = prepared.payload
        argv = ["/bin/sh", "-c", payload["command"]] if "command" in payload else payload["argv"]
        cwd = ctx.workflow_dir if spec.cwd is None else os.path.join(ctx.workflow_dir, spec.cwd)
        if not os.path.isdir(cwd):  # noqa: ASYNC240 - one stat, not worth a thread
            raise StepFailed(f"working folder {cwd} does not exist", retryable=False)
        stdin_data = payload.get("stdin")
        env = child_environment(ctx.protected_env, payload["env"]) | run_marker(ctx)
        missing = _unrunnable(argv[0], env.get("PATH", os.defpath), cwd)
        if missing is not None:
            raise StepFailed(f"cannot start {argv[0]!r}: {missing}", retryable=False)
        # The program waits at a gate, a first line on its standard input, until its process
        # group is recorded (SPEC §4).
        with _Pipes() as pipes:
            try:
                proc = await _start(
                    gated(argv), cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE,
                    stdout=pipes.writing[0], stderr=pipes.writing[1], start_new_session=True)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                raise StepFailed(f"cannot start {argv[0]!r}: {exc.strerror}",
                                 retryable=False) from None
            except ValueError as exc:  # e.g. an embedded NUL in argv
                raise StepFailed(f"cannot start {argv[0]!r}: {exc}", retryable=False) from None
            finally:
                pipes.started()
            limit = spec.max_output_bytes
            # Over the limit, a margin more is kept: a secret the cut splits is scrubbed
            # whole before the cut (see head_text).
            stdout = _Collector(pipes.reading[0], limit=limit + 1, keep=limit + tail_margin(),
                                log=ctx.log, stream="stdout")
            stderr = _Collector(pipes.reading[1], keep_tail=8192 + tail_margin(), log=ctx.log,
                                stream="stderr")
            return await self._watch(proc, prepared, stdin_data, ctx, stdout, stderr, limit)

    async def _watch(self, proc: asyncio.subprocess.Process, prepared: PreparedStep,
                     stdin_data: str | None, ctx: StepContext, stdout: _Collector,
                     stderr: _Collector, limit: int) -> StepOutput:
        """From the start to the end: let it through the gate, read it, end its group."""
        readers = [asyncio.ensure_future(stdout.run()), asyncio.ensure_future(stderr.run())]
        try:
            try:
                await announce_group(ctx, proc.pid)  # start_new_session: pid = group id
            except BaseException:
                _close_stdin(proc)  # the gate reads the end: the program never runs
                raise
            data = b"" if stdin_data is None else \
                stdin_data.encode("utf-8", errors="surrogateescape")
            await _feed(proc, b"\n" + data)  # the gate's line, then the step's input
            exited = asyncio.ensure_future(_exited(proc))
            done, _ = await asyncio.wait([exited, stdout.overflow],  # type: ignore[type-var]
                                         return_when=asyncio.FIRST_COMPLETED)
            if exited not in done:  # too much output: stop it now
                signal_group(proc.pid, signal.SIGKILL)
                await exited
            await _end_group(proc.pid, readers)
        except BaseException:
            signal_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(BaseException):
                await asyncio.shield(_reap(proc, readers))
            # Timed out or cancelled: what it printed so far is kept all the same.
            prepared.output = _text(stdout, limit)
            prepared.stderr = tail_text(bytes(stderr.data))
            raise
        finally:
            _close_pipes(proc)
        if stdout.size > limit:  # scrubbed before the cut: up to a megabyte, off the loop
            out = await asyncio.to_thread(_text, stdout, limit)
        else:
            out = _text(stdout, limit)
        return _outcome(proc.returncode, out, stdout.size, stderr, limit)


def _outcome(code: int | None, out: str, size: int, stderr: _Collector,
             limit: int) -> StepOutput:
    """The ended process's output, or :class:`StepFailed` saying why it failed."""
    err_tail = tail_text(bytes(stderr.data))
    if size > limit:
        raise StepFailed(f"output is larger than max_output_bytes ({limit} bytes)",
                         stderr=err_tail, retryable=False, output=out)
    if code != 0:
        reason = f"exit code {code}" if code is not None and code > 0 else \
            f"killed by signal {-(code or 0)}"
        last = (err_tail or "").strip().splitlines()
        raise StepFailed(f"command failed with {reason}" + (f": {cut(last[-1], 500)}" if last else ""),
                         stderr=err_tail, output=out)
    return StepOutput(output=out, stderr=err_tail)


def _text(stdout: _Collector, limit: int) -> str:
    """The standard output kept (at most ``limit`` bytes, secrets scrubbed before a cut),
    trailing newlines removed."""
    return head_text(bytes(stdout.data), limit, whole=stdout.size == len(stdout.data)).rstrip("\n")


#: ``fcntl``'s F_SETPIPE_SZ (Linux): how much a pipe holds.
_SET_PIPE_SIZE = 1031
_PIPE_BYTES = 1 << 20


class _Pipes:
    """The step's stdout and stderr pipes, read here without asyncio's transports: a step
    printing fast is read in big gulps (see :class:`_Collector`), not a turn of the loop
    per write. Each holds up to 1 MiB (Linux's usual most), not 64 KiB."""

    def __init__(self) -> None:
        import fcntl

        self.reading: list[int] = []
        self.writing: list[int] = []
        for _ in range(2):
            r, w = os.pipe()
            self.reading.append(r)
            self.writing.append(w)
            with contextlib.suppress(OSError):
                fcntl.fcntl(w, _SET_PIPE_SIZE, _PIPE_BYTES)
            os.set_blocking(r, False)

    def started(self) -> None:
        """The child has its copies of the write ends (or never started): close ours, so
        that the reads end when the child's group is gone."""
        for fd in self.writing:
            os.close(fd)
        self.writing = []

    def __enter__(self) -> _Pipes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.started()
        loop = asyncio.get_running_loop()
        for fd in self.reading:
            loop.remove_reader(fd)  # a reader cut off mid-wait (a second cancel) lets go
            os.close(fd)


def _close_stdin(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()


def _unrunnable(program: str, path: str, cwd: str) -> str | None:
    """Why ``program`` cannot be started as ``execvp`` would look for it (``None`` when it
    can): the gate's shell starts in its place, so this is said here, before the start."""
    if "/" in program:
        candidates = [os.path.join(cwd, program)]
    else:
        candidates = [os.path.join(folder or cwd, program) for folder in path.split(os.pathsep)]
    found = [c for c in candidates if os.path.exists(c)]
    if not found:
        return "No such file or directory"
    if not any(os.path.isfile(c) and os.access(c, os.X_OK) for c in found):
        return "Permission denied"
    return None


class _Collector:
    """Reads a pipe to its end, keeping all (up to ``limit``) or only the last bytes, and
    feeding each chunk to the step's log (as ``stream``)."""

    def __init__(self, fd: int, *, limit: int | None = None, keep: int | None = None,
                 keep_tail: int | None = None, log: StepLog | None = None,
                 stream: str = "stdout") -> None:
        self.fd = fd
        #: How many bytes to keep once over ``limit`` (all that fits below it by default).
        self.keep = keep
        self.log = log
        self.stream = stream
        self.limit = limit
        self.keep_tail = keep_tail
        self.data = bytearray()
        self.size = 0
        self.overflow: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                chunk = os.read(self.fd, _READ_BYTES)
            except BlockingIOError:
                await _readable(loop, self.fd)
                continue
            if not chunk:
                return
            if len(chunk) < _GULP_BYTES:
                # Little came: let more gather before the next read (a program writing
                # 4 KiB at a time is read in gulps, not a turn of the loop per write).
                await asyncio.sleep(_GATHER_SECONDS)
            if self.log is not None:
                self.log.feed(self.stream, chunk)
            self.size += len(chunk)
            if self.limit is not None and self.size >= self.limit:
                # Over the limit: keep what fits (shown with the failure), say so, and keep
                # draining (and dropping) until EOF so the pipe closes once the process
                # group is killed.
                keep = self.limit - 1 if self.keep is None else self.keep
                self.data += chunk[:max(keep - len(self.data), 0)]
                if not self.overflow.done():
                    self.overflow.set_result(None)
                continue
            self.data += chunk
            if self.keep_tail is not None and len(self.data) > 2 * self.keep_tail:
                del self.data[: -self.keep_tail]


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Wait until ``fd`` can be read (a pipe's data or end; a pidfd's process exit)."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command did not read all its input: that is its business
    finally:
        proc.stdin.close()


async def _start(argv: Sequence[str], **options: Any) -> asyncio.subprocess.Process:
    """Start the process. A cancel that arrives meanwhile (a sibling failed, the run was
    cancelled) waits for the start to finish, kills the new process's whole group and its
    pipes, then goes on: cancelled inside asyncio's start, the process could be left
    running, and the step would wait for whatever it started to close the pipes."""
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **options))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait([spawn])
            proc = spawn.result()
            signal_group(proc.pid, signal.SIGKILL)
            _close_pipes(proc)
            await asyncio.wait_for(_exited(proc), KILL_GRACE_SECONDS)
        raise


async def _end_group(pgid: int, readers: Sequence[asyncio.Future[None]]) -> None:
    """After the shell exited: kill what it left behind, then drain its pipes."""
    await kill_group(pgid)
    # Anything still holding the pipes escaped the group (setsid): stop waiting soon.
    _, pending = await asyncio.wait(readers, timeout=KILL_GRACE_SECONDS)
    await _stop(pending)


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    """Close our ends of the pipes now: a process that escaped the group (``setsid``)
    may hold the other ends for hours, and ours would stay open as long."""
    transport = getattr(proc, "_transport", None)  # asyncio keeps the pipes there
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait until the process itself has exited (not until its pipes close).

    ``Process.wait()`` on Python 3.11 also waits for stdout to reach EOF, which a
    background child can hold open forever; a pidfd tells us the moment the
    shell exits, without reaping it behind asyncio's back.
    """
    if proc.returncode is None:
        try:
            fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # no pidfd here, or the process is already gone
            fd = None
        if fd is not None:
            try:
                await _readable(asyncio.get_running_loop(), fd)  # readable once it exited
            finally:
                os.close(fd)
    while proc.returncode is None:  # noqa: ASYNC110 - asyncio's child watcher sets it next
        await asyncio.sleep(0.001)


async def _reap(proc: asyncio.subprocess.Process, readers: Sequence[asyncio.Future[None]]) -> None:
    """On timeout or cancel: the group got SIGTERM; SIGKILL it if it lingers, then reap."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KILL_GRACE_SECONDS
    while loop.time() < deadline and (proc.returncode is None or group_alive(proc.pid)):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_exited(proc), KILL_GRACE_SECONDS)
    await _stop(readers)


async def _stop(readers: Iterable[asyncio.Future[None]]) -> None:
    """Cancel the readers still reading, and wait until they have let go of their pipes."""
    pending = [task for task in readers if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
