"""Attack on SPEC §23 (arguments): a ``tools/call`` validates its arguments against the
parameters' schema; arguments that do not fit are a protocol error (-32602) naming the
fields, and no run is created (checked in the database). Raw JSON-RPC over real HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parent))
from attack34_support import answer_of, call, run_count
from serve_support import AppServer
from support import serving

FLOWS = '''
from typing import Literal
from brain import step, workflow

@step
def echo(n: int, x: float, name: str, mode: str, tags: list[str]) -> str:
    return f"{n!r} {x!r} {name!r} {mode!r} {tags!r}"

@workflow(mcp=True)
def numbers(name: str, n: int = 1, x: float = 1.0,
            mode: Literal["a", "b"] = "a", tags: list[str] = []) -> str:
    """Echo its arguments."""
    return echo(n, x, name, mode, tags)
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("atk34-args")
    (folder / "flows.py").write_text(FLOWS)
    with serving(lambda: AppServer(folder / "flows.py"),
                 folder / "brain.db", BRAIN_MCP_WAIT_SECONDS="5", BRAIN_API_TOKEN=None) as app:
        yield app


@pytest.fixture(autouse=True)
def _database(served: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", served.db_url)  # type: ignore[attr-defined]


def _raw_call(arguments_json: str) -> str:
    return ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"numbers",'
            '"arguments":' + arguments_json + "}}")


@pytest.mark.parametrize(("field", "value"), [("x", "NaN"), ("x", "Infinity"),
                                              ("x", "-Infinity"), ("x", "1e999"),
                                              ("n", "1" + "0" * 400)])
def test_numbers_the_api_refuses_are_refused_and_start_nothing(
        served: AppServer, field: str, value: str) -> None:
    assert served.client is not None
    arguments = '{"name": "a", "' + field + '": ' + value + "}"
    # The API's rule for the very same value (SPEC §7): 400, nothing queued.
    before = run_count(served.client)
    api = served.client.post("/api/workflows/numbers/runs",
                             content='{"params": ' + arguments + "}",
                             headers={"Content-Type": "application/json"})
    assert api.status_code == 400, api.text
    assert run_count(served.client) == before
    answer = call(served.client, "numbers", None, raw=_raw_call(arguments))
    message = answer_of(answer.text) if answer.status_code == 200 else {"error": answer.text}
    assert "error" in message, message
    if answer.status_code == 200:  # fixed: -32602 naming the field
        assert message["error"]["code"] == -32602
        assert f"{field}:" in message["error"]["message"], message
    assert run_count(served.client) == before


def test_invalid_arguments_name_the_fields_and_start_nothing(served: AppServer) -> None:
    assert served.client is not None
    before = run_count(served.client)
    answer = call(served.client, "numbers", {"n": "many", "mode": "c", "extra": 1})
    error = answer_of(answer.text)["error"]
    assert error["code"] == -32602
    for field in ("name", "n", "mode", "extra"):
        assert field in error["message"], error
    locs = {tuple(e["loc"]) for e in error["data"]["errors"]}
    assert {("name",), ("n",), ("mode",), ("extra",)} <= locs
    assert run_count(served.client) == before


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
FIELDS = st.sampled_from(["name", "n", "x", "mode", "tags", "Name", "n ", "", "__class__",
                          "extra"])
ARGUMENTS = st.one_of(
    st.dictionaries(FIELDS, JSON_VALUE | st.sampled_from(["a", "b", 3, 2.5, ["t"]]),
                    max_size=5),
    JSON_VALUE)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=ARGUMENTS)
def test_a_call_either_validates_and_runs_or_is_a_protocol_error_and_runs_nothing(
        served: AppServer, arguments: Any) -> None:
    """The oracle is the workflow's own validation (SPEC §21, as the API applies it)."""
    from brain import WorkflowInputError
    from brain.loader import load_file

    assert served.client is not None
    wf = _numbers(load_file)
    try:
        wf.validate_params(arguments if isinstance(arguments, dict) else {"__": arguments})
        valid = isinstance(arguments, dict)
    except WorkflowInputError:
        valid = False
    before = run_count(served.client)
    answer = call(served.client, "numbers", arguments)
    assert answer.status_code in (200, 400), answer.text
    message = answer_of(answer.text)
    after = run_count(served.client)
    if valid:
        assert "result" in message, message
        assert after == before + 1
    else:
        assert message.get("error", {}).get("code") == -32602 or (
            arguments is None and "result" in message), message
        if "error" in message:
            assert after == before, (arguments, message)


_cache: dict[str, Any] = {}


def _numbers(load: Any) -> Any:
    if "wf" not in _cache:
        import tempfile

        folder = Path(tempfile.mkdtemp())
        (folder / "flows_oracle.py").write_text(FLOWS)
        _cache["wf"] = load(folder / "flows_oracle.py")["numbers"]
    return _cache["wf"]
