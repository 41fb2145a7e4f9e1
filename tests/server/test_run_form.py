"""The console's run form is read from a workflow's ``params_schema`` (the JSON Schema
pydantic writes for the parameters): one typed field per parameter, required ones marked,
defaults filled in; and a webhook's JSON object body fills the parameters its keys name.
Schemas here are pydantic's own, for the parameter types a workflow may take."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model

from brain.server.console.run_form import form_fields
from brain.service.hooks import body_params


class Size(Enum):
    small = "small"
    large = "large"


class Target(BaseModel):
    host: str
    port: int = 22


def schema_of(**params: Any) -> dict[str, Any]:
    """The JSON Schema of a parameters object, as pydantic writes it."""
    return create_model("Params", **params).model_json_schema()


def test_each_type_gets_its_kind_of_field_with_its_default() -> None:
    fields = {f.name: f for f in form_fields(schema_of(
        service=(Annotated[str, Field(description="what to deploy")], ...),
        replicas=(int, 2), ratio=(float, 0.5), dry_run=(bool, True),
        env=(Literal["staging", "prod"], "prod"), size=(Size, Size.large),
        tags=(list[int], [1, 2]), target=(Target, ...), note=(str | None, None),
        limit=(int | None, None), labels=(dict[str, str], {})))}
    assert list(fields) == ["service", "replicas", "ratio", "dry_run", "env", "size", "tags",
                            "target", "note", "limit", "labels"]  # the signature's order
    kinds = {name: f.kind for name, f in fields.items()}
    assert kinds == {"service": "text", "replicas": "number", "ratio": "number",
                     "dry_run": "checkbox", "env": "select", "size": "select", "tags": "json",
                     "target": "json", "note": "text", "limit": "number", "labels": "json"}
    assert {n for n, f in fields.items() if f.required} == {"service", "target"}
    assert fields["service"].description == "what to deploy"
    assert (fields["replicas"].value, fields["replicas"].step) == ("2", "1")
    assert (fields["ratio"].value, fields["ratio"].step) == ("0.5", "any")
    assert fields["dry_run"].checked
    assert [(o.value, o.label, o.selected) for o in fields["env"].options] == [
        ('"staging"', "staging", False), ('"prod"', "prod", True)]
    assert [o.selected for o in fields["size"].options] == [False, True]
    assert json.loads(fields["tags"].value) == [1, 2]
    assert fields["target"].value == "" and fields["note"].value == ""
    assert fields["limit"].value == "" and json.loads(fields["labels"].value) == {}


def test_no_parameters_no_fields() -> None:
    assert form_fields(schema_of()) == []
    assert form_fields({}) == []


@pytest.mark.parametrize("choices", [[1, 2, 3], [True, False], ["a"]])
def test_a_literal_of_any_json_values_is_a_select_sending_json(choices: list[Any]) -> None:
    (f,) = form_fields(schema_of(x=(Literal[tuple(choices)], choices[-1])))  # type: ignore[valid-type]
    assert f.kind == "select"
    assert [json.loads(o.value) for o in f.options] == choices
    assert [o.selected for o in f.options][-1]


def test_a_json_object_body_fills_only_the_parameters_it_names() -> None:
    schema = schema_of(service=(str, ...), replicas=(int, 1))
    body = json.dumps({"service": "api", "ref": "main", "replicas": "3"})
    assert body_params(body, schema) == {"service": "api", "replicas": "3"}  # validated later


@pytest.mark.parametrize("body", ["", "plain text", "[1, 2]", '"api"', "3", "{not json",
                                  '{"service": NaN}', "null"])
def test_any_other_body_fills_none(body: str) -> None:
    assert body_params(body, schema_of(service=(str, "x"))) == {}


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=5), max_size=6))
def test_a_workflow_without_parameters_takes_none_from_any_object(value: dict[str, Any]) -> None:
    assert body_params(json.dumps(value), schema_of()) == {}
    names = schema_of(a=(int, 0), b=(str, ""))
    assert body_params(json.dumps(value), names) == {k: v for k, v in value.items()
                                                     if k in ("a", "b")}
