"""What each step of a workflow does, as a fingerprint a run keeps (SPEC §24).

A run stores the fingerprint of every step of the definition it started on; when it goes on
after its workflow changed (woken from a wait, resumed after a crash, retried), the steps it
already started must have the same fingerprint and the same upstream steps in the definition
loaded now. A fingerprint is one short digest per *aspect* of a step (its kind, command,
prompt, options, ``@step`` code...), so two fingerprints that differ also say what changed::

    >>> old = StepPrint("shell", {"command": "1a2b3c4d5e6f"}, ("fetch",))
    >>> new = StepPrint("shell", {"command": "ffffffffffff"}, ("fetch",))
    >>> what_changed(old, new)
    'command changed'

A ``@step``'s ``code`` aspect is :func:`brain.dsl.code_print.code_digest` of its function
(its code, and the code of its module it may run); an ``llm`` step's ``schema=`` model adds
its class's (``schema_code``, shown as ``schema``). ``cache=`` and ``limit=`` are left out:
they say how a step's output is reused or paced, not what the step does (SPEC §26).

Stable across processes and between ``import flows`` and ``brain worker``'s file loader: no
module name, file path, line number or object address goes into a digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brain.dsl.code_print import code_digest

if TYPE_CHECKING:
    from brain.dsl.model import StepSpec, WorkflowSpec

#: Fields that place a step rather than say what it does (its upstream is kept apart).
_PLACEMENT = frozenset({"name", "position", "upstream", "refs", "group", "instance",
                        "previous_refs"})
#: Options that say how a step's output is reused or paced, not what the step does (SPEC
#: §26): changing them lets a waiting run go on (the cache key has its own rules).
_NOT_WHAT_IT_DOES = frozenset({"cache", "limit"})
#: The word an aspect is shown as in "... changed", where it is not the field's own name.
_SHOWN = {"server_command": "server", "when": "condition", "output_schema": "schema",
          "schema_code": "schema", "for_each": "for_each list"}
_DIGEST_CHARS = 12
#: Why a pending step of a run ends skipped once the run went on without it.
REMOVED = "removed from the workflow"


@dataclass(frozen=True)
class StepPrint:
    """One step's fingerprint: its kind, a digest per aspect of what it does, and the names
    of the steps it waits for (sorted)."""

    kind: str
    aspects: Mapping[str, str]
    upstream: tuple[str, ...] = ()

    def same_as(self, other: StepPrint) -> bool:
        """Whether ``other`` does the same, after the same steps."""
        return (self.kind == other.kind and dict(self.aspects) == dict(other.aspects)
                and self.upstream == other.upstream)


@dataclass(frozen=True)
class WorkflowPrint:
    """The fingerprints of a workflow's steps, in definition order, and the JSON text a run
    stores them as (the same text for the same definition, in any process)."""

    steps: Mapping[str, StepPrint]
    text: str

    @classmethod
    def of(cls, steps: Mapping[str, StepPrint]) -> WorkflowPrint:
        """The fingerprint made of ``steps`` (its text computed once)."""
        data = {name: [p.kind, dict(sorted(p.aspects.items())), list(p.upstream)]
                for name, p in steps.items()}
        return cls(dict(steps), json.dumps(data, separators=(",", ":")))

    @classmethod
    def parse(cls, text: str) -> WorkflowPrint:
        """A fingerprint as a run stored it (see :attr:`text`)."""
        data = json.loads(text)
        steps = {name: StepPrint(str(kind), {str(k): str(v) for k, v in aspects.items()},
                                 tuple(str(u) for u in upstream))
                 for name, (kind, aspects, upstream) in data.items()}
        return cls(steps, text)

    def step(self, name: str) -> StepPrint | None:
        """The fingerprint of step ``name``; a ``for_each`` instance's (``name[3]``) is its
        step's."""
        return self.steps.get(name.split("[", 1)[0])

    def downstream(self, name: str) -> set[str]:
        """``name`` and every step that waits for it, directly or not."""
        found, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for other, p in self.steps.items():
                if current in p.upstream and other not in found:
                    found.add(other)
                    todo.append(other)
        return found


def what_changed(old: StepPrint | None, new: StepPrint | None) -> str | None:
    """What differs between a step's stored fingerprint and its loaded one, as shown in
    ``workflow changed since the run started: step 'NAME' (WHAT)``; ``None`` when nothing
    does."""
    if new is None:
        return "removed"
    if old is None:
        return "added"
    if old.kind != new.kind:
        return "kind changed"
    aspects = sorted({k for k in {*old.aspects, *new.aspects}
                      if old.aspects.get(k) != new.aspects.get(k)})
    if aspects:
        return ", ".join(dict.fromkeys(_SHOWN.get(a, a) for a in aspects)) + " changed"
    if old.upstream != new.upstream:
        return "upstream changed"
    return None


def fingerprint(spec: WorkflowSpec) -> WorkflowPrint:
    """The fingerprint of every step of ``spec`` (computed once per loaded workflow: see
    ``Workflow.fingerprint``)."""
    groups = {g.index: g for g in spec.groups}
    steps = {}
    for step in spec.steps:
        aspects = {k: _digest(v) for k, v in _aspects(step).items()}
        if step.group is not None and step.group in groups:
            group = groups[step.group]
            aspects["for_each"] = _digest([group.items, group.item_name])
        steps[step.name] = StepPrint(step.kind, aspects, tuple(sorted(step.upstream)))
    return WorkflowPrint.of(steps)


def _aspects(step: StepSpec) -> dict[str, Any]:
    """The values of what a step does, by aspect: its fields set to other than their
    defaults (so options added in later releases leave older fingerprints alone)."""
    from brain.dsl.model import FunctionStepSpec, LlmStepSpec, McpStepSpec, sensitive_header

    data = step.model_dump(mode="json", exclude_defaults=True)
    found = {k: v for k, v in data.items()
             if k not in _PLACEMENT and k not in _NOT_WHAT_IT_DOES and k != "kind"}
    if isinstance(step, FunctionStepSpec):
        # the module differs between `import flows` and the file loader: the qualified name
        found["function"] = getattr(step.func, "__qualname__", step.function)
        found["code"] = code_digest(step.func)
    if isinstance(step, LlmStepSpec) and step.schema_model is not None:
        # the JSON Schema (output_schema) misses the model's validators and methods
        found["schema_code"] = code_digest(step.schema_model)
    if isinstance(step, McpStepSpec) and "headers" in found:
        # a rotated token is no change of what the step does (and no digest of it is kept)
        found["headers"] = {k: "***" if sensitive_header(k) else v
                            for k, v in found["headers"].items()}
    return found


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]


# --- the workflow's version --------------------------------------------------------------


def workflow_version(source_file: str | None) -> str | None:
    """The version of a workflow file: its content's digest (12 hex digits), with
    ``@`` and the git commit checked out (12 digits) when the file is in a git repository
    (``5e1f0a9c33b2@1a2b3c4d5e6f``); ``None`` without a readable file."""
    if not source_file:
        return None
    try:
        data = Path(source_file).read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]
    commit = git_commit(Path(source_file).parent)
    return f"{digest}@{commit[:_DIGEST_CHARS]}" if commit else digest


def git_commit(folder: Path) -> str | None:
    """The commit checked out in the git repository holding ``folder``, read from its
    ``.git`` (a worktree's ``.git`` file and packed refs included), or ``None``."""
    try:
        for place in (folder.resolve(), *folder.resolve().parents):
            dot = place / ".git"
            if dot.is_dir():
                return _head(dot)
            if dot.is_file():
                text = dot.read_text().strip()
                if text.startswith("gitdir:"):
                    gitdir = Path(text[len("gitdir:"):].strip())
                    return _head(gitdir if gitdir.is_absolute() else place / gitdir)
                return None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _head(gitdir: Path) -> str | None:
    head = (gitdir / "HEAD").read_text().strip()
    if not head.startswith("ref:"):
        return head or None
    ref = head[len("ref:"):].strip()
    common = gitdir
    if (gitdir / "commondir").is_file():
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    for base in (gitdir, common):
        if (base / ref).is_file():
            return (base / ref).read_text().strip() or None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    return None
