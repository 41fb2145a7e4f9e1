"""Structured LLM answers and token usage (SPEC §18, §1 "@step", §2 "LLM" and "Failure").

Every run goes over real HTTP to a :class:`brain.testing.FakeChatServer` on 127.0.0.1 (or,
when one is running, a real llama.cpp server, see ``test_a_real_model_answers_a_tiny_schema``);
httpx is never mocked. Runs are recorded in the test's own SQLite file (see the conftest).
Models live at module level so that ``@step`` annotations resolve.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from brain import WorkflowDefinitionError, llm, secret, step, workflow
from brain.dsl.model import LlmStepSpec
from brain.executors.llm_schema import REASON_CHARS, checked_answer
from brain.testing import FakeChatServer, completion
from brain.testing.chat_server import ScriptedResponse


class Verdict(BaseModel):
    urgent: bool
    reason: str = "none"


class Aliased(BaseModel):
    model_config = ConfigDict(populate_by_name=False)
    due_date: str = Field(alias="dueDate")


class Opaque:
    """A type pydantic can hold but cannot describe in JSON Schema."""


class NoJsonSchema(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Opaque


class Réponse(BaseModel):  # a class name with a letter OpenAI's schema names do not allow
    ok: bool


PERSON = {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer", "minimum": 0}},
          "required": ["name"]}


def answer(content: str, prompt_tokens: Any = None, completion_tokens: Any = None) -> dict[str, Any]:
    """A completion carrying ``content``, with a ``usage`` block when tokens are given."""
    data = completion(content)
    if prompt_tokens is not None or completion_tokens is not None:
        data["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": None}
    return data


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply="unscripted") as s:
        yield s


def one_step_workflow(name: str, url: str, schema: Any, **options: Any) -> Any:
    """A workflow with one llm() step ``ask`` that asks ``url`` with ``schema``."""
    def body() -> None:
        llm("ask", prompt="Judge this", model="m", provider_url=url, schema=schema, **options)

    return workflow(name=name)(body)


# --- the request and the output --------------------------------------------------------


def test_a_pydantic_schema_is_sent_as_response_format_and_the_output_is_compact_json(
        server: FakeChatServer) -> None:
    server.respond(json=answer('{ "urgent" : true }', 12, 5))
    r = one_step_workflow("schema_model", server.url, Verdict)()
    assert r.succeeded, r.error
    step_result = r.steps["ask"]
    # Validated: the default is filled in; compact: no spaces.
    assert step_result.output == '{"urgent":true,"reason":"none"}'
    assert step_result.usage == {"prompt_tokens": 12, "completion_tokens": 5}
    assert step_result.inputs["schema"] == "Verdict"
    [request] = server.requests
    assert request.json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": Verdict.model_json_schema(), "strict": True}}
    assert request.json["messages"] == [{"role": "user", "content": "Judge this"}]


def test_a_dict_schema_is_sent_as_is_named_answer_and_checked_with_jsonschema(
        server: FakeChatServer) -> None:
    server.respond(content='{\n  "name": "Ștefan",  "age": 41\n}')
    r = one_step_workflow("schema_dict", server.url, PERSON)()
    assert r.succeeded, r.error
    assert r.steps["ask"].output == '{"name":"Ștefan","age":41}'  # compact, not ASCII-escaped
    assert server.requests[0].json["response_format"]["json_schema"] == {
        "name": "answer", "schema": PERSON, "strict": True}


def test_an_aliased_model_outputs_its_aliases_so_the_output_parses_back(
        server: FakeChatServer) -> None:
    server.respond(content='{"dueDate": "2026-01-02"}')
    r = one_step_workflow("schema_alias", server.url, Aliased)()
    assert r.succeeded, r.error
    assert r.steps["ask"].output == '{"dueDate":"2026-01-02"}'
    assert Aliased.model_validate_json(r.steps["ask"].output or "").due_date == "2026-01-02"


def test_a_class_name_is_made_a_valid_schema_name(server: FakeChatServer) -> None:
    server.respond(content='{"ok": true}')
    r = one_step_workflow("schema_name", server.url, Réponse)()
    assert r.succeeded, r.error
    assert server.requests[0].json["response_format"]["json_schema"]["name"] == "R_ponse"


# --- asking once more --------------------------------------------------------------


def test_an_invalid_answer_is_shown_its_error_and_asked_once_more(server: FakeChatServer) -> None:
    server.respond(json=answer('{"urgent": "perhaps"}', 30, 7))
    server.respond(json=answer('{"urgent": false, "reason": "routine"}', 45, 9))
    r = one_step_workflow("schema_reask", server.url, Verdict, retries=2)()
    assert r.succeeded, r.error
    ask = r.steps["ask"]
    assert ask.output == '{"urgent":false,"reason":"routine"}'
    assert ask.tries == 1  # the second question is part of the same try
    # Both answers' tokens count, in the result and in the run's JSON.
    assert ask.usage == {"prompt_tokens": 75, "completion_tokens": 16}
    [shown] = [s for s in r.to_json_dict()["steps"] if s["name"] == "ask"]
    assert shown["usage"] == {"prompt_tokens": 75, "completion_tokens": 16}
    first, second = (req.json for req in server.requests)
    assert second["response_format"] == first["response_format"]
    assert second["model"] == "m"
    assert second["messages"][:2] == [{"role": "user", "content": "Judge this"},
                                      {"role": "assistant", "content": '{"urgent": "perhaps"}'}]
    reask = second["messages"][2]
    assert reask["role"] == "user"
    assert "does not match" in reask["content"]
    assert "valid boolean" in reask["content"] and "urgent" in reask["content"]
    assert len(second["messages"]) == 3


def test_two_invalid_answers_fail_the_step_at_once_whatever_its_retries(
        server: FakeChatServer) -> None:
    server.respond(json=answer("not json at all", 10, 2))
    server.respond(json=answer('{"name": 7}', 20, 3))
    r = one_step_workflow("schema_twice", server.url, PERSON, retries=2,
                          retry_delay_seconds=0.01)()
    assert r.status == "failed"
    ask = r.steps["ask"]
    assert ask.status == "failed"
    assert ask.tries == 1
    assert (ask.error or "").startswith("answer does not match the schema: ")
    assert "7 is not of type 'string' at $.name" in (ask.error or "")
    assert ask.usage == {"prompt_tokens": 30, "completion_tokens": 5}  # counted before failing
    assert len(server.requests) == 2
    assert "not JSON" in server.requests[1].json["messages"][-1]["content"]
    assert r.error == f"step 'ask' failed: {ask.error}"


def test_the_error_sent_back_is_short_and_scrubbed_of_secrets(
        server: FakeChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-live-" + "k" * 24
    monkeypatch.setenv("SCHEMA_TEST_KEY", key)
    echoed = json.dumps(key + " " + "x" * 2000)  # a string where a number is wanted
    server.respond(content=echoed)
    server.respond(content=echoed)
    url = server.url

    @workflow
    def schema_scrubbed() -> None:
        llm("ask", prompt="p", model="m", provider_url=url, api_key=secret("SCHEMA_TEST_KEY"),
            schema={"type": "integer"})

    r = schema_scrubbed()
    reask = server.requests[1].json["messages"][-1]["content"]
    assert key not in reask and "***" in reask
    assert len(reask) < REASON_CHARS + 200
    error = r.steps["ask"].error or ""
    assert error.startswith("answer does not match the schema: ")
    assert key not in error and len(error) < REASON_CHARS + 100


def test_a_failed_request_while_asking_again_is_retried_from_the_start(
        server: FakeChatServer) -> None:
    server.respond(content='{"urgent": 3}')
    server.respond(status=503, headers={"Retry-After": "0"})
    server.respond(content='{"urgent": true}')
    r = one_step_workflow("schema_reask_503", server.url, Verdict, retries=1,
                          retry_delay_seconds=0.01)()
    assert r.succeeded, r.error
    assert r.steps["ask"].tries == 2
    # The new try asks the original question, not the conversation of the failed one.
    assert server.requests[2].json["messages"] == [{"role": "user", "content": "Judge this"}]


def test_a_schema_that_cannot_be_checked_fails_the_step_without_asking_again(
        server: FakeChatServer) -> None:
    server.respond(content="{}")
    r = one_step_workflow("schema_unresolvable", server.url,
                          {"$ref": "https://schemas.invalid/person.json"}, retries=2)()
    ask = r.steps["ask"]
    assert ask.status == "failed" and ask.tries == 1
    assert (ask.error or "").startswith("the schema cannot be checked: ")
    assert "schemas.invalid" in (ask.error or "")
    assert len(server.requests) == 1


def test_a_step_without_a_schema_sends_no_response_format_and_keeps_the_text(
        server: FakeChatServer) -> None:
    server.respond(json=answer("  plain text, not JSON ", 3, 4))
    url = server.url

    @workflow
    def no_schema() -> None:
        llm("ask", prompt="p", model="m", provider_url=url)

    r = no_schema()
    assert r.steps["ask"].output == "  plain text, not JSON "
    assert "response_format" not in server.requests[0].json
    assert r.steps["ask"].usage == {"prompt_tokens": 3, "completion_tokens": 4}


# --- servers that take the schema in another form ---------------------------------------

LLAMA_CPP_PYTHON_REFUSAL = {"error": {"message": "1 validation error: {'type': 'literal_error', "
                                                 "'loc': ('body', 'response_format', 'type'), 'msg': "
                                                 "\"Input should be 'text' or 'json_object'\"}"}}


def test_a_server_that_refuses_json_schema_is_asked_with_json_object_for_the_rest_of_the_run(
        server: FakeChatServer) -> None:
    """llama-cpp-python's server answers HTTP 500 to ``json_schema`` and takes the schema as
    ``{"type": "json_object", "schema": ...}``."""
    server.respond(status=500, json=LLAMA_CPP_PYTHON_REFUSAL)
    server.respond(content='{"urgent": true}')
    server.respond(content='{"name": "Ana"}')
    url = server.url

    @workflow
    def json_object_fallback() -> None:
        llm("first", prompt="p", model="m", provider_url=url, schema=Verdict)
        llm("second", prompt="p", model="m", provider_url=url, schema=PERSON)

    r = json_object_fallback()
    assert r.succeeded, r.error
    assert r.steps["first"].tries == 1
    assert [req.json["response_format"]["type"] for req in server.requests] == [
        "json_schema", "json_object", "json_object"]
    assert server.requests[1].json["response_format"]["schema"] == Verdict.model_json_schema()
    assert server.requests[2].json["response_format"] == {"type": "json_object", "schema": PERSON}


def test_when_both_forms_are_refused_the_first_refusal_is_the_error(
        server: FakeChatServer) -> None:
    server.respond(status=400, json={"error": {"message": "'response_format' of type "
                                                          "'json_schema' is not supported"}})
    server.respond(status=400, json={"error": {"message": "'response_format' json_object needs "
                                                          "the word json"}})
    r = one_step_workflow("schema_refused", server.url, Verdict, retries=2)()
    error = r.steps["ask"].error or ""
    assert error.startswith("HTTP 400 from ") and "json_schema' is not supported" in error
    assert len(server.requests) == 2  # a 400 is not retried


def test_an_http_error_that_does_not_name_response_format_is_not_a_refusal(
        server: FakeChatServer) -> None:
    server.respond(status=500, json={"error": {"message": "out of memory"}})
    r = one_step_workflow("schema_500", server.url, Verdict)()
    assert "out of memory" in (r.steps["ask"].error or "")
    assert len(server.requests) == 1


# --- usage ---------------------------------------------------------------------------


def test_every_try_counts_its_usage(server: FakeChatServer) -> None:
    """A 500 without usage, a 503 whose body reports usage, then an answer: what was reported
    adds up, across tries."""
    server.respond(status=500, headers={"Retry-After": "0"})
    server.respond(status=503, json={"error": {"message": "overloaded"},
                                     "usage": {"prompt_tokens": 8, "completion_tokens": 0}},
                   headers={"Retry-After": "0"})
    server.respond(json=answer("fine", 8, 2))
    url = server.url

    @workflow
    def usage_retried() -> None:
        llm("ask", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = usage_retried()
    assert r.succeeded, r.error
    assert r.steps["ask"].tries == 3
    assert r.steps["ask"].usage == {"prompt_tokens": 16, "completion_tokens": 2}


def test_an_answer_that_fails_the_step_still_counts(server: FakeChatServer) -> None:
    server.respond(json=answer("", 50, 4000))  # a reasoning model out of tokens
    url = server.url

    @workflow
    def usage_failed() -> None:
        llm("ask", prompt="p", model="m", provider_url=url)

    r = usage_failed()
    assert r.steps["ask"].status == "failed"
    assert r.steps["ask"].usage == {"prompt_tokens": 50, "completion_tokens": 4000}


@pytest.mark.parametrize(("prompt_tokens", "completion_tokens", "expected"), [
    (None, None, None),
    ("12", 3.5, None),
    (True, False, None),
    (12, None, {"prompt_tokens": 12, "completion_tokens": 0}),
], ids=["absent", "not-ints", "booleans", "one-of-two"])
def test_only_whole_numbers_count_as_usage(server: FakeChatServer, prompt_tokens: Any,
                                           completion_tokens: Any, expected: Any) -> None:
    server.respond(json=answer("ok", prompt_tokens, completion_tokens))
    url = server.url

    @workflow
    def usage_shapes() -> None:
        llm("ask", prompt="p", model="m", provider_url=url)

    r = usage_shapes()
    assert r.succeeded, r.error
    assert r.steps["ask"].usage == expected


# --- typed @step parameters ---------------------------------------------------------------


@step
def describe(verdict: Verdict) -> str:
    return f"{type(verdict).__name__}: urgent={verdict.urgent}, reason={verdict.reason}"


def test_a_step_parameter_annotated_with_the_model_receives_it_parsed(
        server: FakeChatServer) -> None:
    server.respond(content='{"urgent": true, "reason": "outage"}')
    url = server.url

    @workflow
    def typed_param() -> None:
        verdict = llm("ask", prompt="p", model="m", provider_url=url, schema=Verdict)
        describe(verdict)

    r = typed_param()
    assert r.succeeded, r.error
    assert r.steps["describe"].output == "Verdict: urgent=True, reason=outage"
    assert r.steps["describe"].inputs["verdict"] == '{"urgent":true,"reason":"outage"}'


def test_text_that_does_not_parse_as_the_model_fails_the_typed_step_at_once(
        server: FakeChatServer) -> None:
    server.respond(content="Yes, this is urgent.")
    url = server.url

    @workflow
    def typed_param_bad() -> None:
        verdict = llm("ask", prompt="p", model="m", provider_url=url)  # no schema
        describe.with_options(retries=2)(verdict)

    r = typed_param_bad()
    assert r.status == "failed"
    failed = r.steps["describe"]
    assert failed.status == "failed" and failed.tries == 1
    assert "argument 'verdict' is not a valid Verdict" in (failed.error or "")
    assert "JSON" in (failed.error or "")


# --- definition errors -------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "words"), [
    (int, "pydantic model class or a JSON Schema dict, not type"),
    (Verdict(urgent=True), "the class, not an instance"),
    ([{"type": "string"}], "not list"),
    ("Verdict", "not str"),
    ({"type": "nope"}, "not a valid JSON Schema"),
    ({"type": "object", "properties": {"a": {"minimum": "zero"}}},
     "not a valid JSON Schema: 'zero' is not of type 'number' at schema['properties']['a']"),
    ({"type": "object", "default": object()}, "schema must be JSON data"),
    ({"type": "number", "maximum": float("nan")}, "schema must be JSON data"),
    (NoJsonSchema, "schema=NoJsonSchema has no JSON Schema"),
], ids=["not-a-model", "an-instance", "a-list", "a-string", "bad-type", "bad-keyword",
        "not-json", "nan", "model-without-json-schema"])
def test_a_bad_schema_is_a_definition_error(schema: Any, words: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        @workflow
        def bad_schema() -> None:
            llm("ask", prompt="p", model="m", schema=schema)

    message = str(caught.value)
    assert "workflow 'bad_schema', step 'ask'" in message
    assert words in message


def test_the_schema_counts_in_the_definition_hash_only_when_given() -> None:
    def traced(schema: Any) -> Any:
        def body() -> None:
            llm("ask", prompt="p", model="m", schema=schema)

        return workflow(name="hashed")(body)

    plain = traced(None)
    [spec] = plain.spec.steps
    assert isinstance(spec, LlmStepSpec)
    dumped = spec.model_dump(mode="json")
    # The class and the name are never dumped; an unset schema is left out of the hash
    # (model._LATER_DEFAULTS), so workflows written before schema= keep their hash.
    assert not {"schema_model", "schema_name"} & set(dumped)
    assert dumped["output_schema"] is None
    assert plain.spec.definition_hash() != traced(Verdict).spec.definition_hash()
    assert traced(PERSON).spec.definition_hash() == traced(dict(PERSON)).spec.definition_hash()
    assert traced(PERSON).spec.definition_hash() != traced(Verdict).spec.definition_hash()


def test_changing_the_callers_dict_later_changes_nothing() -> None:
    schema: dict[str, Any] = {"type": "object"}

    @workflow
    def copied_schema() -> None:
        llm("ask", prompt="p", model="m", schema=schema)

    schema["type"] = "string"
    [spec] = copied_schema.spec.steps
    assert isinstance(spec, LlmStepSpec)
    assert spec.output_schema == {"type": "object"}


# --- any answer: valid compact JSON out, or the message ---------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
PEOPLE = st.fixed_dictionaries({"name": st.text(max_size=8)},
                               optional={"age": st.integers(-3, 200), "x": JSON_VALUES})
ANSWERS = st.one_of(
    JSON_VALUES.map(json.dumps),
    PEOPLE.map(lambda p: json.dumps(p, indent=2, ensure_ascii=bool(len(p) % 2))),
    st.text(max_size=20),
    st.sampled_from(["NaN", '{"name": NaN}', '{"name": Infinity}', "", " ", '{"name": "a"} x',
                     '{"urgent": true}', '{"urgent": 1}', '{"urgent": "yes"}']))


def _spec(schema: Any) -> LlmStepSpec:
    def body() -> None:
        llm("ask", prompt="p", model="m", schema=schema)

    [spec] = workflow(name="checked")(body).spec.steps
    assert isinstance(spec, LlmStepSpec)
    return spec


DICT_SPEC, MODEL_SPEC = _spec(PERSON), _spec(Verdict)


@given(text=ANSWERS)
@settings(max_examples=400, deadline=None)
def test_any_answer_gives_valid_compact_json_or_a_short_reason(text: str) -> None:
    import jsonschema

    output, reason = checked_answer(DICT_SPEC, text)
    if output is None:
        assert reason and len(reason) <= REASON_CHARS + 1
    else:
        value = json.loads(output)
        jsonschema.validate(value, PERSON)
        assert value == json.loads(text)
        assert output == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    output, reason = checked_answer(MODEL_SPEC, text)
    if output is None:
        assert reason and len(reason) <= REASON_CHARS + 1
    else:
        parsed = Verdict.model_validate_json(output)
        assert parsed == Verdict.model_validate_json(text)
        assert output == parsed.model_dump_json()  # compact


class EchoServer(FakeChatServer):
    """Answers every request with :attr:`content` (set per example)."""

    content = ""

    def _next(self) -> ScriptedResponse:
        return ScriptedResponse(json=completion(self.content))


@pytest.fixture(scope="module")
def echo_server() -> Iterator[EchoServer]:
    with EchoServer() as s:
        yield s


@given(text=ANSWERS.filter(bool))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_run_gives_valid_compact_json_or_fails_with_the_message(text: str,
                                                                  echo_server: EchoServer) -> None:
    echo_server.content = text
    r = one_step_workflow("schema_any", echo_server.url, PERSON)()
    ask = r.steps["ask"]
    if r.succeeded:
        value = json.loads(ask.output or "")
        assert value == json.loads(text)
        assert ask.output == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        assert (ask.error or "").startswith("answer does not match the schema: "), ask.error
        assert ask.tries == 1


# --- a real model ------------------------------------------------------------------------

LOCAL_LLM_URL = os.environ.get("BRAIN_TEST_LOCAL_LLM_URL", "http://127.0.0.1:8811/v1")


@functools.cache
def _local_llm_is_up() -> bool:
    try:
        return httpx.get(LOCAL_LLM_URL + "/models", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _local_llm_is_up(),
                    reason=f"no local model server at {LOCAL_LLM_URL} (see shared LOCAL_LLM.md)")
def test_a_real_model_answers_a_tiny_schema() -> None:
    """llama.cpp's server turns ``response_format`` into a grammar: even a 270M model
    answers JSON that matches, and reports its usage."""
    schema = {"type": "object", "properties": {"colour": {"type": "string"}},
              "required": ["colour"], "additionalProperties": False}

    @workflow
    def real_model_schema() -> None:
        llm("ask", prompt="What colour is the sky on a clear day? Answer in JSON.", model="gemma",
            provider_url=LOCAL_LLM_URL, schema=schema, max_tokens=40, temperature=0,
            timeout_seconds=240)

    r = real_model_schema()
    assert r.succeeded, r.error
    value = json.loads(r.steps["ask"].output or "")
    assert isinstance(value["colour"], str)
    usage = r.steps["ask"].usage
    assert usage is not None and usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


class Sky(BaseModel):
    colour: str
    clear: bool


@step
def sky_line(sky: Sky) -> str:
    return f"{sky.colour} ({'clear' if sky.clear else 'cloudy'})"


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _local_llm_is_up(),
                    reason=f"no local model server at {LOCAL_LLM_URL} (see shared LOCAL_LLM.md)")
def test_a_real_model_answers_a_pydantic_schema_that_a_typed_step_receives() -> None:
    @workflow
    def real_model_pydantic() -> None:
        sky = llm("ask", prompt="Describe the sky today as JSON with colour and clear.",
                  model="gemma", provider_url=LOCAL_LLM_URL, schema=Sky, max_tokens=60,
                  temperature=0, timeout_seconds=240)
        sky_line(sky)

    r = real_model_pydantic()
    assert r.succeeded, r.error
    sky = Sky.model_validate_json(r.steps["ask"].output or "")
    assert r.steps["sky_line"].output == f"{sky.colour} ({'clear' if sky.clear else 'cloudy'})"
