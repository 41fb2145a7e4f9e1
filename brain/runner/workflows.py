"""What the runner needs of a workflow, and the secrets it declares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from brain._secrets import declare_secret_names, declared_secret_names, remember, remember_environment
from brain.dsl.fingerprint import WorkflowPrint
from brain.dsl.model import WorkflowSpec


class RunnableWorkflow(Protocol):
    """What the runner needs of a workflow (:class:`brain.Workflow` is one): its spec,
    where its file lives (relative paths in steps start there), what its steps do and its
    file's version (SPEC §24) and the workflows that
    handle its failures."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> WorkflowSpec: ...

    @property
    def definition_hash(self) -> str: ...

    @property
    def source_dir(self) -> str: ...

    @property
    def fingerprint(self) -> WorkflowPrint: ...

    @property
    def version(self) -> str | None: ...

    @property
    def failure_handlers(self) -> Sequence[RunnableWorkflow]: ...


def remember_known_secrets(wf: RunnableWorkflow) -> frozenset[str]:
    """Remember every secret this process can know of now (so it is scrubbed from all that
    is stored, the trigger included); return the variables no step sees unless it passes
    them itself through ``env=``: the webhook secret and ``secret()`` variables of every
    workflow defined in this process (and of ``wf``)."""
    names, literals = wf.spec.declared_secrets
    declare_secret_names(names)
    for literal in literals:
        remember(literal)
    protected = declared_secret_names()
    remember_environment(protected | {"LLM_API_KEY", "BRAIN_API_TOKEN", "THE_BRAIN_API_TOKEN"})
    return protected
