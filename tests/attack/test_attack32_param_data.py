"""Attack (round 32): a parameter's value reaches a step only as data, in every position a
``{params.X}`` placeholder may stand — shell ``command`` (bare, in ``"…"``, in ``'…'``,
inside a quoted ``$(…)``), ``argv``, ``stdin``, ``env``, ``for_each`` elements, ``@step``
arguments, ``when=``, ``concurrency_key`` and a child's arguments — for hostile text
(quotes, ``$(…)``, backticks, newlines, leading ``-``, unicode). Real ``/bin/sh``
processes, the runs recorded in the test's SQLite file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain import for_each, shell, step, when, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

#: Hostile pieces, mixed with arbitrary text (no NUL: a NUL fails the step by contract;
#: no lone surrogates: no JSON client can send them and the API refuses them).
PIECES = ["'", '"', "\\", "$(touch pwned)", "`id`", "${HOME}", "$HOME", "\n", "\r", "\t",
          " -rf ", "--help", "-n", "-e", ";", "|", "&", "*", "?", "[a]", "~", "#", "{x}",
          "{params.v}", "{{params.v}}", "!", "%s", "é", "日本", "\u202e", "\u0085", "😀"]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=20)
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), TEXT), max_size=6).map("".join)


@step
def echo_arg(v: str) -> str:
    """The value the step received, as is."""
    return v


def make_positions() -> Any:
    @workflow(concurrency_key="k-{params.v}", max_concurrent_runs=2)
    def positions(v: str, items: list[str], flag: bool = False) -> dict[str, Any]:
        bare = shell("bare", command="printf '%s' {params.v}")
        dq = shell("dq", command='printf "%s" "{params.v}"')
        sq = shell("sq", command="printf '%s' '{params.v}'")
        sub = shell("sub", command='printf "%s" "$(printf \'%s\' {params.v})"')
        av = shell("argv", argv=["printf", "%s", f"{v}"])
        si = shell("stdin", command="cat", stdin=f"{v}")
        en = shell("env", command='printf "%s" "$VALUE"', env={"VALUE": f"{v}"})
        arg = echo_arg(v)
        with for_each(items) as item:
            shell("each", argv=["printf", "%s", f"{item}"])
        with when(flag):
            shell("flagged", command="printf yes")
        return {"bare": bare, "dq": dq, "sq": sq, "sub": sub, "argv": av, "stdin": si,
                "env": en, "arg": arg}

    return positions


def shown(value: str) -> str:
    """A shell step's output for ``value`` printed as is: trailing newlines removed."""
    return value.rstrip("\n")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(v=HOSTILE, items=st.lists(HOSTILE, max_size=3), flag=st.sampled_from([False, "true"]))
def test_a_hostile_value_is_data_in_every_position(v: str, items: list[str], flag: Any,
                                                    tmp_path_factory: pytest.TempPathFactory
                                                    ) -> None:
    wf = make_positions()
    folder = tmp_path_factory.mktemp("positions")
    result = wf.run(params={"v": v, "items": items, "flag": flag is True},
                    store=f"sqlite+aiosqlite:///{folder / 'brain.db'}")
    assert result.status == "succeeded", result.error
    out = result.output
    # command text after $(…) loses its trailing newlines too, as the shell does
    assert out["sub"] == shown(shown(v))
    for key in ("bare", "dq", "sq", "argv", "stdin", "env"):
        assert out[key] == shown(v), (key, v, out[key])
    assert out["arg"] == v
    each = [s.output for n, s in result.steps.items() if n.startswith("each[")]
    assert each == [shown(i) for i in items]
    assert result.steps["flagged"].status == "skipped"
    assert not (folder / "pwned").exists()


def test_a_text_true_is_not_a_true_condition(tmp_path: Any) -> None:
    """``when=`` on a parameter of no fixed type: only JSON ``true`` holds, never the
    text ``"true"``. (A ``str`` parameter in ``when=`` is a definition error.)"""
    @workflow
    def cond(flag: Any = "") -> None:
        with when(flag):
            shell("flagged", command="printf yes")

    result = cond(flag="true")
    assert result.steps["flagged"].status == "skipped", result.steps["flagged"]


@pytest.mark.parametrize("value", ["null", "123", '"quoted"', "true", "[1]", '{"a": 1}'])
def test_a_step_argument_typed_optional_str_gets_the_text(value: str) -> None:
    """A ``str`` parameter given to a ``@step`` argument annotated ``str | None``: the text
    arrives as it is (held)."""
    @step
    def seen(x: str | None) -> str:
        return json.dumps(x)

    @workflow
    def direct(s: str) -> str:
        return seen(s)  # type: ignore[return-value]

    result = direct(s=value)
    assert result.status == "succeeded", result.error
    assert json.loads(result.output) == value
