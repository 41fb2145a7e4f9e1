"""Typed parameters read from a workflow's signature: the allowed types and their JSON
Schema, defaults, validation (``WorkflowInputError``), and every definition error.

(No ``from __future__ import annotations`` here: some workflows below are annotated with
classes defined inside the test, which postponed annotations could not resolve.)
"""

import enum
import json
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from support import definition_error

from brain import WorkflowInputError, shell, workflow


class Target(BaseModel):
    host: str
    port: int = 22


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def echo(*words: object) -> None:
    shell("echo", argv=["echo", *map(str, words)])


def test_every_allowed_type_has_a_schema_and_validates() -> None:
    @workflow
    def typed(text: str, n: int, ratio: float, flag: bool, nothing: None,
              env: Literal["staging", "prod"], color: Color, tags: list[str],
              counts: dict[str, int], target: Target,
              described: Annotated[str, Field(description="what it is")] = "d",
              plain="untyped"):
        echo(text, n, ratio, flag, nothing, env, color, tags, counts, target, described, plain)

    props = typed.params_schema["properties"]
    assert typed.params_schema["type"] == "object"
    assert [props[n].get("type") for n in ("text", "n", "ratio", "flag", "nothing", "tags",
                                            "counts", "plain")] == [
        "string", "integer", "number", "boolean", "null", "array", "object", "string"]
    assert props["env"]["enum"] == ["staging", "prod"]
    assert props["described"]["description"] == "what it is"
    assert props["plain"]["default"] == "untyped"
    assert set(typed.params_schema["required"]) == {
        "text", "n", "ratio", "flag", "nothing", "env", "color", "tags", "counts", "target"}
    got = typed.validate_params({
        "text": "t", "n": "5", "ratio": 1, "flag": True, "nothing": None, "env": "prod",
        "color": "blue", "tags": ["a"], "counts": {"x": 1}, "target": {"host": "h"}})
    assert got == {"text": "t", "n": 5, "ratio": 1.0, "flag": True, "nothing": None,
                   "env": "prod", "color": "blue", "tags": ["a"], "counts": {"x": 1},
                   "target": {"host": "h", "port": 22}, "described": "d", "plain": "untyped"}
    json.dumps(got)  # JSON values only


def test_defaults_are_applied_and_kept_as_json() -> None:
    @workflow
    def defaults(target: Target = Target(host="h"), color: Color = Color.RED,
                 tags: list[str] = ["a"]):  # noqa: B006 - a JSON default, never mutated
        echo(target, color, tags)

    assert defaults.validate_params(None) == {"target": {"host": "h", "port": 22},
                                              "color": "red", "tags": ["a"]}
    assert defaults.params_schema["properties"]["tags"]["default"] == ["a"]


def test_no_parameters_takes_none() -> None:
    @workflow
    def bare():
        echo("x")

    assert bare.params_schema["properties"] == {}
    assert bare.validate_params({}) == {}
    with pytest.raises(WorkflowInputError) as info:
        bare.validate_params({"x": 1})
    assert info.value.errors == [{"loc": ["x"], "msg": info.value.errors[0]["msg"],
                                  "type": "extra_forbidden"}]


def test_validation_errors_have_pydantic_shape_and_one_line_per_field() -> None:
    @workflow
    def deploy(service: str, n: int = 1, target: Target = Target(host="h")):
        echo(service, n, target)

    with pytest.raises(WorkflowInputError) as info:
        deploy.validate_params({"n": "many", "target": {"port": 1}, "bogus": 1})
    exc = info.value
    assert isinstance(exc, ValueError)
    assert sorted((tuple(e["loc"]), e["type"]) for e in exc.errors) == [
        (("bogus",), "extra_forbidden"), (("n",), "int_parsing"), (("service",), "missing"),
        (("target", "host"), "missing")]
    assert all(set(e) == {"loc", "msg", "type"} for e in exc.errors)
    lines = str(exc).splitlines()
    assert "service: Field required" in lines
    assert "target.host: Field required" in lines
    assert len(lines) == 4
    with pytest.raises(WorkflowInputError, match="must be an object"):
        deploy.validate_params(["api"])  # type: ignore[arg-type]


def test_a_secret_given_as_input_is_not_in_the_errors() -> None:
    @workflow
    def counted(n: int):
        echo(n)

    with pytest.raises(WorkflowInputError) as info:
        counted.validate_params({"n": "hunter2-secret"})
    assert "hunter2-secret" not in str(info.value) + json.dumps(info.value.errors)


def test_output_schema_comes_from_the_return_annotation() -> None:
    @workflow
    def returns(service: str) -> Target:
        return shell("t", argv=["echo", service])

    @workflow
    def returns_nothing():
        echo("x")

    assert returns.output_schema is not None
    assert returns.output_schema["required"] == ["host"]
    assert returns_nothing.output_schema is None
    assert returns.spec.params.validate_output({"host": "a"}) == {"host": "a", "port": 22}
    with pytest.raises(ValueError, match="output does not match the return type: "):
        returns.spec.params.validate_output({"port": 1})


def test_the_docstring_is_the_description() -> None:
    @workflow
    def described(service: str):
        """Deploy SERVICE."""
        echo(service)

    assert described.description == "Deploy SERVICE."


# --- definition errors ------------------------------------------------------------------------


def test_star_args_are_definition_errors() -> None:
    def star(*rest):
        echo("x")

    def star_star(a: str, **more):
        echo(a)

    assert "*rest" in definition_error(star)
    assert "**more" in definition_error(star_star)


def test_positional_only_is_a_definition_error() -> None:
    def positional(a: str, /, b: str = "x"):
        echo(a, b)

    assert "positional-only" in definition_error(positional)


def test_a_type_without_json_schema_is_a_definition_error() -> None:
    class Opaque:
        pass

    def opaque(thing: Opaque):
        echo("x")

    def callable_param(fn: Any = None):  # Any is fine...
        echo(fn)

    message = definition_error(opaque)
    assert "'thing'" in message and "cannot be validated from JSON" in message
    workflow(name="fine")(callable_param)


def test_a_default_that_does_not_validate_is_a_definition_error() -> None:
    def bad_default(n: int = "many"):  # type: ignore[assignment]
        echo(n)

    def not_json(tags: list[str] = {"a"}):  # type: ignore[assignment]  # noqa: B006
        echo(tags)

    def literal_default(env: Literal["a", "b"] = "c"):  # type: ignore[assignment]
        echo(env)

    for body in (bad_default, literal_default):
        message = definition_error(body)
        assert "the default" in message and "is not a valid value" in message
    # A set validates as a list: kept as the JSON list.
    assert workflow(name="okset")(not_json).validate_params({}) == {"tags": ["a"]}


def test_placeholders_naming_no_parameter_are_definition_errors() -> None:
    def unknown(service: str):
        shell("a", argv=["echo", "{params.servce}"])

    def bad_field(target: Target):
        shell("a", argv=["echo", "{params.target.hots}"])

    def field_of_text(service: str):
        shell("a", argv=["echo", f"{service.upper}"])

    def field_attribute(target: Target):
        shell("a", argv=["echo", f"{target.hots}"])

    assert "{params.servce} does not name a parameter" in definition_error(unknown)
    assert "has no field 'hots'" in definition_error(bad_field)
    assert "has no field 'upper'" in definition_error(field_of_text)
    assert "has no field 'hots'" in definition_error(field_attribute)


def test_misusing_a_parameter_while_tracing_is_a_definition_error() -> None:
    def branch(flag: bool = False):
        if flag:
            echo("x")
        echo("y")

    def concat(service: str):
        shell("a", argv=["echo", service + "x"])

    for body in (branch, concat):
        assert "exist only at run time" in definition_error(body)
