"""Cached steps at work (SPEC §26): a step with ``cache=`` looks for an entry under its key
before it runs, and a step that ran and succeeded stores its output under it.

The key is a digest of the step's kind, its fingerprint (what it does: SPEC §24, without
the options that do not change its output — its cache, limit, timeout, retries, condition),
the folder it runs in (a shell step's, a stdio MCP server's) and its resolved inputs;
``Cache(key=[...])`` replaces the inputs with the listed values. Secret values count by
their own digest, in the order the step uses them (the inputs show each as ``***``, so the
order is what tells which secret went where), so a changed or swapped secret misses;
nothing but the one digest of all of it is stored. What the key misses is what the
fingerprint misses: code in other modules, globals' values, the files a step reads and the
world it talks to.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brain.dsl.fingerprint import StepPrint
from brain.results import base_name

if TYPE_CHECKING:
    from brain.dsl.model import StepSpec
    from brain.executors.base import PreparedStep, Resolve
    from brain.runner.workflows import RunnableWorkflow
    from brain.store.cache import CachedOutput
    from brain.store.interfaces import CostStore

#: Aspects of a step's fingerprint that do not change what it outputs.
_NOT_IN_KEY = frozenset({"cache", "limit", "timeout_seconds", "retries", "retry_delay_seconds",
                         "when"})


def step_fingerprint(wf: RunnableWorkflow, step: str) -> str:
    """The part of step ``step``'s fingerprint (SPEC §24) that its cache key holds: a
    digest of its kind and of what it does."""
    found: StepPrint | None = wf.fingerprint.step(base_name(step))
    if found is None:
        return ""
    aspects = sorted((k, v) for k, v in found.aspects.items() if k not in _NOT_IN_KEY)
    return _digest([found.kind, aspects])


def cache_key(wf: RunnableWorkflow, spec: StepSpec, prepared: PreparedStep,
              resolve: Resolve) -> str:
    """The key of a step's cache entry (see the module)."""
    assert spec.cache is not None
    given: Any
    if spec.cache.key is not None:
        given = ["key", [resolve(text, False) for text in spec.cache.key]]
    else:
        given = ["inputs", prepared.inputs]
    # In the order of use, not sorted: two secrets swapped between places must miss.
    secrets = [hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()
               for s in prepared.secrets]
    return _digest([spec.kind, step_fingerprint(wf, spec.name), given, secrets,
                    working_folder(spec, wf.source_dir)])


def working_folder(spec: StepSpec, workflow_dir: str) -> str | None:
    """The folder a step's program runs in, as the executor resolves it: a shell step's
    ``cwd`` (relative to the workflow's folder, which it is by default) or a stdio MCP
    server's (the workflow's folder); ``None`` for steps whose output does not depend on
    it (the same ``pwd`` in two folders is two outputs)."""
    if spec.kind == "shell":
        cwd = getattr(spec, "cwd", None)
        return os.path.normpath(os.path.join(workflow_dir, cwd or ""))
    if spec.kind == "mcp_tool" and getattr(spec, "server_command", None) is not None:
        return os.path.normpath(workflow_dir)
    return None


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CacheLook:
    """What a cached step found: its key, and the entry (``None``: a miss)."""

    key: str
    entry: CachedOutput | None


class StepCaches:
    """The cache of one run's steps: looked up before a step runs, filled after it
    succeeds."""

    def __init__(self, store: CostStore, wf: RunnableWorkflow, run_id: str) -> None:
        self.store = store
        self.wf = wf
        self.run_id = run_id

    async def look(self, spec: StepSpec, prepared: PreparedStep, resolve: Resolve) -> CacheLook:
        """Look for the step's unexpired entry."""
        key = cache_key(self.wf, spec, prepared, resolve)
        return CacheLook(key, await self.store.cache_get(key))

    async def keep(self, spec: StepSpec, key: str, output: str, stderr: str | None,
                   usage: dict[str, int] | None) -> None:
        """Store what a step that ran and succeeded output (already scrubbed)."""
        assert spec.cache is not None
        # Under the step's own name: a for_each step's instances (each[0], each[1]) are
        # cleared with it (brain cache clear --step each).
        await self.store.cache_put(key, workflow=self.wf.name, step=base_name(spec.name),
                                   kind=spec.kind,
                                   output=output, stderr=stderr, usage=usage,
                                   run_id=self.run_id, expire_seconds=spec.cache.expire_seconds)


def hit_mark(entry: CachedOutput) -> dict[str, Any]:
    """What a step answered from the cache keeps of it (its ``cached`` column): the usage it
    saved, and the run that stored the entry and when."""
    return {"usage": entry.usage, "run_id": entry.run_id,
            "at": entry.created_at.isoformat() if entry.created_at is not None else None}
