"""``@workflow(mcp=True)`` (SPEC §23): a workflow is offered as an MCP tool only when it says
so; the flag changes nothing of how it runs."""

from __future__ import annotations

import pytest

from brain import WorkflowDefinitionError, shell, workflow
from brain.mcp_server.tools import offered, run_envelope, tools


def test_nothing_is_offered_unless_declared() -> None:
    @workflow
    def quiet() -> str:
        return shell("a", argv=["true"])

    @workflow(mcp=True)
    def loud() -> str:
        """Say it."""
        return shell("a", argv=["true"])

    assert not quiet.spec.mcp and loud.spec.mcp
    assert quiet.definition_hash == workflow(name="quiet", mcp=True)(quiet.fn).definition_hash
    assert list(offered([quiet, loud])) == ["loud"]
    assert [t.name for t in tools([quiet, loud])] == ["loud", "brain_run"]
    assert tools([loud])[0].description == "Say it."


def test_mcp_takes_a_bool() -> None:
    with pytest.raises(WorkflowDefinitionError, match="mcp= takes True or False"):
        @workflow(mcp="yes")  # type: ignore[arg-type]
        def odd() -> None:
            shell("a", argv=["true"])


def test_the_output_envelope_keeps_the_return_schemas_definitions_resolvable() -> None:
    schema = {"$defs": {"Item": {"type": "object"}}, "type": "array",
              "items": {"$ref": "#/$defs/Item"}}
    envelope = run_envelope(schema)
    assert envelope["$defs"] == {"Item": {"type": "object"}}
    assert envelope["properties"]["result"]["items"] == {"$ref": "#/$defs/Item"}
    assert envelope["required"] == ["run_id", "status"] and "$defs" in schema  # not changed
