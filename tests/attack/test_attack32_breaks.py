"""Attack (round 32): breaks found in the promises of typed parameters, child runs and
typed outputs (SPEC: placeholders, inputs and results, child runs). Each failing test is
``xfail(strict=True)``: it passes as a record while the break stands, and fails (so it
must be un-marked) once fixed. Real ``/bin/sh`` processes, the runs in SQLite files, the
API through Litestar's test client on ``create_app``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from serve_support import brain_argv, clean_env
from support import write_source

from brain import WorkflowInputError, secret, shell, step, workflow
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "attack32-SECRET-value-7f3e9a"
REPO = Path(__file__).resolve().parents[2]


def stored(db: Path, sql: str) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # no schema: nothing stored
            return []


# --- 1. a parameter's text given to a child's ``str | None`` parameter is parsed as JSON ---


@step
def seen(x: str | None) -> dict[str, Any]:
    """What the step received."""
    return {"x": x}


def make_child_and_parent() -> Any:
    @workflow
    def optional_child(note: str | None = None) -> dict[str, Any]:
        return seen(note)  # type: ignore[return-value]

    @workflow
    def optional_parent(s: str):  # type: ignore[no-untyped-def]
        return optional_child(note=f"{s}")

    return optional_parent


@pytest.mark.parametrize("value", ["null", "123", '"quoted"', "[1]"])
def test_a_str_parameter_reaches_a_childs_optional_str_as_the_same_text(value: str) -> None:
    result = make_child_and_parent()(s=value)
    assert result.status == "succeeded", result.error
    assert result.output == {"x": value}


# --- 2. a child's text output that looks like JSON changes type in its parent --------------


def make_text_child_parents() -> tuple[Any, Any]:
    @workflow
    def text_child(v: str = "x") -> str:
        return shell("say", argv=["printf", "%s", f"{v}"])  # type: ignore[return-value]

    @workflow
    def text_parent(v: str = "x") -> str:
        return text_child(v=f"{v}")  # type: ignore[no-any-return]

    @workflow
    def any_parent(v: str = "x"):  # type: ignore[no-untyped-def]
        return {"child": text_child(v=f"{v}")}

    return text_parent, any_parent


@pytest.mark.parametrize("value", ["123", "null", "true", "[1]", '"q"'])
def test_a_childs_str_output_is_its_parents_output(value: str) -> None:
    text_parent, any_parent = make_text_child_parents()
    typed = text_parent(v=value)
    untyped = any_parent(v=value)
    assert typed.status == "succeeded", typed.error
    assert typed.output == value
    assert untyped.output == {"child": value}


def test_a_childs_plain_text_output_is_its_parents_output() -> None:
    """Held: text that is no JSON passes through the child step unchanged."""
    text_parent, any_parent = make_text_child_parents()
    assert text_parent(v="plain text").output == "plain text"
    assert any_parent(v="it's").output == {"child": "it's"}


# --- 3. stdin= of a step whose program is a shell runs a parameter as code ----------------


def test_stdin_feeding_a_shell_is_refused_or_data(tmp_path: Path) -> None:
    from brain import WorkflowDefinitionError

    marker = tmp_path / "pwned"
    try:
        @workflow
        def feeds(note: str = "x") -> None:
            shell("a", argv=["sh"], stdin=f"{note}")
    except WorkflowDefinitionError:
        return  # refused at definition: held
    feeds(note=f"touch {marker}")
    assert not marker.exists(), "the parameter ran as shell code"


def test_a_here_string_feeding_a_shell_is_refused() -> None:
    """Held (the comparison point): the same thing written in the command is refused."""
    from brain import WorkflowDefinitionError

    with pytest.raises(WorkflowDefinitionError):
        @workflow
        def here(note: str = "x") -> None:
            shell("a", command="sh <<< {params.note}")


# --- 4. a secret given as a parameter: dict keys, names, first enqueue ---------------------


def make_secretive() -> Any:
    @workflow
    def secretive(note: str = "", labels: dict[str, str] = {},  # noqa: B006
                  counts: dict[str, int] = {}) -> Any:  # noqa: B006
        shell("s", argv=["printf", "%s", f"{note}"], env={"T": secret("ATTACK32_TOKEN")})
        return {"labels": labels}

    return secretive


def test_a_secret_as_a_dict_key_is_never_stored_in_clear(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("ATTACK32_TOKEN", TOKEN)
    result = make_secretive()(labels={TOKEN: "v"})
    assert result.status == "succeeded", result.error
    rows = stored(tmp_path / "brain.db", "select params, output from brain_runs")
    assert rows and TOKEN not in json.dumps(rows), rows
    assert TOKEN not in json.dumps(result.params) + json.dumps(result.output)


@pytest.mark.parametrize("params", [{"counts": {TOKEN: "not a number"}}, {TOKEN: 1}])
async def test_a_422_never_shows_a_secret_in_clear(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   params: dict[str, Any]) -> None:
    monkeypatch.setenv("ATTACK32_TOKEN", TOKEN)
    async with AsyncTestClient(create_app([make_secretive()]), base_url="http://127.0.0.1",
                               timeout=60) as client:
        r = await client.post("/api/workflows/secretive/runs", json={"params": params})
    assert r.status_code == 422, r.text
    assert stored(tmp_path / "brain.db", "select id from brain_runs") == []  # held
    assert TOKEN not in r.text, r.text


def test_a_secret_as_a_value_is_stored_scrubbed(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Held: a string value that is a known secret is stored as ***."""
    monkeypatch.setenv("ATTACK32_TOKEN", TOKEN)
    result = make_secretive()(note=TOKEN)
    rows = stored(tmp_path / "brain.db", "select params from brain_runs")
    assert rows and TOKEN not in json.dumps(rows)
    assert TOKEN not in json.dumps(result.params)


def test_enqueue_from_a_fresh_process_stores_no_secret_in_clear(tmp_path: Path) -> None:
    folder = tmp_path / "wf"
    folder.mkdir()
    write_source(folder, "enq.py", '''
import asyncio, os
from brain import secret, shell, workflow

@workflow
def enq(note: str = ""):
    shell("s", argv=["printf", "%s", f"{note}"], env={"T": secret("ATTACK32_TOKEN")})

asyncio.run(enq.enqueue(params={"note": os.environ["ATTACK32_TOKEN"]}))
''')
    db = tmp_path / "enq.db"
    env = clean_env(db, {"ATTACK32_TOKEN": TOKEN, "PYTHONPATH": str(REPO)})
    done = subprocess.run([sys.executable, str(folder / "enq.py")], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = stored(db, "select params from brain_runs")
    assert rows, "nothing was queued"
    assert TOKEN not in json.dumps(rows), rows


# --- 5. a float output that is not a JSON number ------------------------------------------


def make_float(folder: Path) -> Path:
    return write_source(folder, "num.py", '''
from brain import shell, workflow


@workflow
def num(x: str = "1") -> float:
    return shell("s", argv=["printf", "%s", f"{x}"])
''')


@pytest.mark.parametrize("x", ["NaN", "1e999"])
def test_a_float_output_is_one_json_value_everywhere(tmp_path: Path, x: str) -> None:
    path = make_float(tmp_path)
    db = tmp_path / "num.db"
    env = clean_env(db)
    plain = subprocess.run([*brain_argv(), "run", str(path), "-p", f"x={x}"], env=env,
                           capture_output=True, text=True, timeout=60)
    as_json = subprocess.run([*brain_argv(), "run", str(path), "-p", f"x={x}", "--json"],
                             env=env, capture_output=True, text=True, timeout=60)
    printed = plain.stdout.strip()  # stdout holds the output alone (progress is on stderr)
    answered = json.loads(as_json.stdout)
    if answered["status"] == "failed":  # refused as not matching the return type: fine
        assert "output does not match the return type" in answered["error"]
        assert plain.returncode == 1
        return
    # succeeded: the value must be the same JSON value in both
    assert json.loads(printed) == answered["output"], (printed, answered["output"])
    assert answered["output"] is not None


def test_a_finite_float_output_is_the_same_everywhere(tmp_path: Path) -> None:
    """Held: a finite float is one value in ``brain run``, ``--json`` and the API."""
    path = make_float(tmp_path)
    env = clean_env(tmp_path / "num.db")
    as_json = subprocess.run([*brain_argv(), "run", str(path), "-p", "x=2.5", "--json"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(as_json.stdout)["output"] == 2.5


# --- held: invalid input stores nothing, in-process ---------------------------------------


@pytest.mark.parametrize("params", [{"counts": {"a": "x"}}, {"nope": 1}, {"note": 5},
                                    {"labels": {"a": {"b": "c"}}}])
def test_invalid_parameters_store_nothing(tmp_path: Path, params: dict[str, Any]) -> None:
    with pytest.raises(WorkflowInputError):
        make_secretive()(**params)
    assert stored(tmp_path / "brain.db", "select id from brain_runs") == []


def test_deep_nesting_in_brain_run_params_is_exit_2(tmp_path: Path) -> None:
    """``--params`` nested 50,000 deep: a clear refusal (exit 2), no traceback, no run."""
    path = write_source(tmp_path, "deep.py", '''
from typing import Any
from brain import shell, workflow


@workflow
def deep(x: Any = None):
    shell("s", command="true")
''')
    db = tmp_path / "deep.db"
    deep = "[" * 50_000 + "]" * 50_000
    done = subprocess.run([*brain_argv(), "run", str(path), "--params", f'{{"x": {deep}}}'],
                          env=clean_env(db), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "Traceback" not in done.stderr
    assert stored(db, "select id from brain_runs") == []

