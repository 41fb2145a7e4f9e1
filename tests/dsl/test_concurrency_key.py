"""``@workflow(concurrency_key=..., max_concurrent_runs=N)`` (SPEC §19): what a key may be."""

from __future__ import annotations

import pytest

from brain import WorkflowDefinitionError, shell, step, trigger, workflow


def test_a_key_of_trigger_fields_is_kept_and_leaves_the_definition_hash_alone() -> None:
    def body() -> None:
        shell("go", command="true")

    keyed = workflow(name="deploy", concurrency_key="{trigger.headers.x-repo}",
                     max_concurrent_runs=1)(body)
    plain = workflow(name="deploy", max_concurrent_runs=1)(body)
    assert keyed.spec.concurrency_key == "{trigger.headers.x-repo}"
    assert keyed.definition_hash == plain.definition_hash
    lazy = workflow(name="deploy2", concurrency_key=trigger.headers["x-repo"],
                    max_concurrent_runs=2)(body)
    assert lazy.spec.concurrency_key == "{trigger.headers.x-repo}"


@pytest.mark.parametrize(("key", "limit", "says"), [
    ("{trigger.body}", None, "needs max_concurrent_runs"),
    ("{fetch}", 1, "only trigger fields"),
    ("{previous.fetch}", 1, "only trigger fields"),
    ("", 1, "text of trigger placeholders"),
    (42, 1, "text of trigger placeholders"),
])
def test_bad_keys_are_definition_errors(key: object, limit: int | None, says: str) -> None:
    @step
    def fetch() -> str:
        return "x"

    with pytest.raises(WorkflowDefinitionError, match=says):
        @workflow(concurrency_key=key, max_concurrent_runs=limit)  # type: ignore[arg-type]
        def bad() -> None:
            fetch()
