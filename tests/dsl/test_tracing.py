"""Tracing a ``@workflow`` (SPEC §1): the graph it records, the nodes it hands out,
and every definition mistake it refuses when the function is decorated.
"""

from __future__ import annotations

import json

import pytest
from support import definition_error

import brain
from brain import WorkflowDefinitionError, cron, parallel, secret, shell, step, trigger, webhook, workflow

MISUSE = "step outputs exist only at run time; transform them in a @step"


def edges(wf: brain.Workflow) -> set[tuple[str, str]]:
    """The graph's edges as a set, after checking the tuple holds no duplicates."""
    listed = list(wf.graph.edges)
    assert len(listed) == len(set(listed)), f"duplicate edges in {listed}"
    return set(listed)


def ok(name: str) -> brain.StepNode:
    """A trivial shell step."""
    return shell(name, command="true")


# --- the graph ------------------------------------------------------------------------------


def test_chain_each_step_waits_for_the_one_before() -> None:
    @workflow
    def chain():
        ok("a")
        ok("b")
        ok("c")

    assert chain.graph.nodes == ("a", "b", "c")
    assert edges(chain) == {("a", "b"), ("b", "c")}


def test_a_single_step_workflow_has_no_edges() -> None:
    @workflow
    def single():
        ok("only")

    assert single.graph.nodes == ("only",)
    assert single.graph.edges == ()


def test_references_add_edges_without_transitive_reduction() -> None:
    @workflow
    def refs():
        a = ok("a")
        ok("b")
        shell("c", command=f"echo {a}")

    assert edges(refs) == {("a", "b"), ("b", "c"), ("a", "c")}


def test_a_reference_to_the_step_just_before_is_one_edge() -> None:
    @workflow
    def dedup():
        a = ok("a")
        shell("b", argv=["echo", a, f"{a}", "{a}"], stdin=a, env={"A": a})

    assert dedup.graph.edges == (("a", "b"),)


def test_fan_out_and_fan_in() -> None:
    @workflow
    def fan():
        src = ok("src")
        with parallel():
            shell("x", command=f"echo {src}")
            ok("y")
            ok("z")
        ok("sink")

    assert fan.graph.nodes == ("src", "x", "y", "z", "sink")
    assert edges(fan) == {
        ("src", "x"), ("src", "y"), ("src", "z"),
        ("x", "sink"), ("y", "sink"), ("z", "sink"),
    }


def test_fan_in_step_referencing_the_step_before_the_block_keeps_that_edge() -> None:
    @workflow
    def fan_ref():
        src = ok("src")
        with parallel():
            ok("x")
            ok("y")
        shell("sink", command=f"echo {src}")

    assert edges(fan_ref) == {("src", "x"), ("src", "y"), ("x", "sink"), ("y", "sink"),
                              ("src", "sink")}


def test_two_consecutive_parallel_blocks() -> None:
    @workflow
    def two_blocks():
        ok("a")
        with parallel():
            ok("b")
            ok("c")
        with parallel():
            ok("d")
            ok("e")
        ok("f")

    assert two_blocks.graph.nodes == ("a", "b", "c", "d", "e", "f")
    assert edges(two_blocks) == {
        ("a", "b"), ("a", "c"),
        ("b", "d"), ("c", "d"), ("b", "e"), ("c", "e"),
        ("d", "f"), ("e", "f"),
    }


def test_parallel_block_first_in_the_workflow_has_no_upstream() -> None:
    @workflow
    def block_first():
        with parallel():
            ok("a")
            ok("b")
        ok("c")

    assert edges(block_first) == {("a", "c"), ("b", "c")}


def test_parallel_block_last_in_the_workflow() -> None:
    @workflow
    def block_last():
        ok("a")
        with parallel():
            ok("b")
            ok("c")

    assert edges(block_last) == {("a", "b"), ("a", "c")}


def test_empty_parallel_block_changes_nothing() -> None:
    @workflow
    def empty_block():
        ok("a")
        with parallel():
            pass
        ok("b")

    assert empty_block.graph.nodes == ("a", "b")
    assert edges(empty_block) == {("a", "b")}


def test_a_sibling_referencing_a_sibling_waits_for_it() -> None:
    @workflow
    def siblings():
        ok("src")
        with parallel():
            x = ok("x")
            shell("y", argv=["echo", x])
            ok("z")
        ok("sink")

    assert edges(siblings) == {
        ("src", "x"), ("src", "y"), ("src", "z"), ("x", "y"),
        ("x", "sink"), ("y", "sink"), ("z", "sink"),
    }


def test_after_with_a_node_adds_an_edge() -> None:
    @workflow
    def after_node():
        a = ok("a")
        ok("b")
        shell("c", command="true", after=[a])

    assert edges(after_node) == {("a", "b"), ("b", "c"), ("a", "c")}


def test_after_with_a_step_name_adds_an_edge() -> None:
    @workflow
    def after_name():
        ok("a")
        ok("b")
        shell("c", command="true", after=["a"])

    assert edges(after_name) == {("a", "b"), ("b", "c"), ("a", "c")}


def test_after_orders_siblings_inside_a_parallel_block() -> None:
    @workflow
    def after_sibling():
        ok("src")
        with parallel():
            x = ok("x")
            shell("y", command="true", after=[x])
            shell("z", command="true", after=["y"])

    assert edges(after_sibling) == {("src", "x"), ("src", "y"), ("src", "z"), ("x", "y"), ("y", "z")}


def test_after_duplicating_an_order_edge_is_one_edge() -> None:
    @workflow
    def after_dup():
        a = ok("a")
        shell("b", command=f"echo {a}", after=[a, "a"])

    assert after_dup.graph.edges == (("a", "b"),)


def test_previous_references_add_no_edge() -> None:
    @workflow
    def prev():
        with parallel():
            a = ok("a")
            shell("b", command=f"echo {a.previous}")
            shell("c", command="echo {previous.a} {previous.d} {previous.c}")
        ok("d")

    assert edges(prev) == {("a", "d"), ("b", "d"), ("c", "d")}


def test_plain_strings_with_placeholders_are_references_too() -> None:
    @workflow
    def plain():
        ok("a")
        with parallel():
            ok("b")
            shell("c", command="echo {b}")

    assert edges(plain) == {("a", "b"), ("a", "c"), ("b", "c")}


def test_escaped_placeholders_and_trigger_fields_are_not_references() -> None:
    @workflow
    def no_refs():
        ok("a")
        with parallel():
            shell("b", command="echo {{c}} {trigger.body} ${HOME}")
            ok("c")

    assert edges(no_refs) == {("a", "b"), ("a", "c")}


def test_step_functions_take_part_in_the_graph() -> None:
    @step
    def count(text: str, extra: dict) -> int:
        return len(text)

    @workflow
    def mixed():
        src = ok("src")
        with parallel():
            other = ok("other")
            count(src, {"deep": [other]})
        ok("end")

    assert mixed.graph.nodes == ("src", "other", "count", "end")
    assert edges(mixed) == {("src", "other"), ("src", "count"), ("other", "count"),
                            ("other", "end"), ("count", "end")}


def test_a_loop_runs_once_at_trace_time() -> None:
    @workflow
    def looped():
        prev = ok("start")
        for i in range(3):
            prev = shell(f"step-{i}", argv=["echo", prev])

    assert looped.graph.nodes == ("start", "step-0", "step-1", "step-2")
    assert edges(looped) == {("start", "step-0"), ("step-0", "step-1"), ("step-1", "step-2")}


def test_graph_is_public_plain_data() -> None:
    @workflow
    def plain_data():
        ok("a")
        ok("b")

    graph = plain_data.graph
    assert isinstance(graph, brain.WorkflowGraph)
    assert graph.nodes == ("a", "b")
    assert graph.edges == (("a", "b"),)


# --- nodes --------------------------------------------------------------------------------


def test_nodes_turn_into_their_placeholder_text() -> None:
    seen: dict[str, object] = {}

    @workflow
    def texts():
        fetch = ok("fetch")
        seen["node"] = fetch
        seen["str"] = str(fetch)
        seen["fstring"] = f"[{fetch}]"
        seen["previous"] = str(fetch.previous)
        seen["previous_f"] = f"{fetch.previous}"
        seen["previous_twice"] = str(fetch.previous.previous)
        seen["format_s"] = f"{fetch!s}"
        seen["format"] = format(fetch)

    assert isinstance(seen["node"], brain.StepNode)
    assert seen["str"] == "{fetch}"
    assert seen["fstring"] == "[{fetch}]"
    assert seen["previous"] == seen["previous_f"] == seen["previous_twice"] == "{previous.fetch}"
    assert seen["format_s"] == "{fetch}"
    assert seen["format"] == "{fetch}"


def test_trigger_fields_turn_into_their_placeholder_text() -> None:
    assert str(trigger.body) == "{trigger.body}"
    assert str(trigger.event) == "{trigger.event}"
    assert str(trigger.path) == "{trigger.path}"
    assert f"{trigger.headers['X-GitHub-Event']}" == "{trigger.headers.x-github-event}"


def test_nodes_and_trigger_fields_are_recorded_as_placeholders_in_the_spec() -> None:
    @workflow
    def recorded():
        fetch = ok("fetch")
        shell("cmd", command=trigger.body, quote=False)  # a placeholder as the command: raw only
        shell("run", argv=["notify", fetch, trigger.event, f"--path={trigger.path}"],
              stdin=trigger.headers["X-GitHub-Event"],
              env={"FETCHED": fetch, "OLD": fetch.previous, "EVENT": trigger.event, "PLAIN": "x"})
        shell("fmt", command=f"echo {fetch} {trigger.headers['X-Request-Id']}")

    cmd, run, fmt = recorded.spec.steps[1:]
    assert cmd.command == "{trigger.body}"
    assert run.command is None
    assert run.argv == ("notify", "{fetch}", "{trigger.event}", "--path={trigger.path}")
    assert run.stdin == "{trigger.headers.x-github-event}"
    assert run.env == {"FETCHED": "{fetch}", "OLD": "{previous.fetch}", "EVENT": "{trigger.event}",
                       "PLAIN": "x"}
    assert fmt.command == "echo {fetch} {trigger.headers.x-request-id}"


def test_placeholders_inside_argv_stdin_and_env_need_no_bare_words() -> None:
    """Only ``command`` goes through a shell, so quotes elsewhere are just text."""

    @workflow
    def unquoted():
        a = ok("a")
        shell("b", argv=["sh", "-c", "echo '$1'", f"'{a}'"], stdin=f'"{a}"', env={"V": f"'{a}'"})

    assert unquoted.spec.steps[1].argv[-1] == "'{a}'"


def test_quote_false_allows_a_placeholder_inside_quotes() -> None:
    @workflow
    def raw():
        a = ok("a")
        shell("b", command=f"echo '{a}'", quote=False)

    assert raw.spec.steps[1].command == "echo '{a}'"
    assert edges(raw) == {("a", "b")}


def test_secret_may_stand_for_an_env_value() -> None:
    @workflow
    def with_secret():
        shell("s", command="true", env={"TOKEN": secret("MY_TOKEN")})

    assert with_secret.spec.steps[0].env["TOKEN"] == secret("MY_TOKEN")


# --- definition errors --------------------------------------------------------------------


def assert_names(message: str, *, workflow: str = "broken", step: str | None = None) -> None:
    assert f"'{workflow}'" in message, message
    if step is not None:
        assert f"'{step}'" in message, message


def test_definition_errors_are_public_brain_errors() -> None:
    assert brain.WorkflowDefinitionError is WorkflowDefinitionError
    assert issubclass(WorkflowDefinitionError, brain.BrainError)


def test_duplicate_step_name() -> None:
    def body():
        ok("fetch")
        ok("fetch")

    message = definition_error(body)
    assert_names(message, step="fetch")
    assert "duplicate" in message.lower()


def test_duplicate_step_name_across_a_parallel_block() -> None:
    def body():
        with parallel():
            ok("x")
        ok("x")

    assert "duplicate" in definition_error(body).lower()


def test_reference_to_an_unknown_step() -> None:
    def body():
        shell("use", command="echo {nowhere}")

    message = definition_error(body)
    assert_names(message, step="use")
    assert "{nowhere}" in message


def test_reference_to_a_later_step() -> None:
    def body():
        shell("early", command="echo {later}")
        ok("later")

    message = definition_error(body)
    assert_names(message, step="early")
    assert "{later}" in message


def test_a_step_cannot_reference_itself() -> None:
    def body():
        shell("me", command="echo {me}")

    message = definition_error(body)
    assert_names(message, step="me")
    assert "{me}" in message


def test_reference_to_a_sibling_later_in_the_same_block() -> None:
    def body():
        with parallel():
            shell("x", argv=["echo", "{y}"])
            ok("y")

    message = definition_error(body)
    assert_names(message, step="x")
    assert "{y}" in message


def test_after_naming_an_unknown_or_later_step() -> None:
    def unknown():
        shell("a", command="true", after=["ghost"])

    def later():
        shell("a", command="true", after=["b"])
        ok("b")

    for body, missing in [(unknown, "ghost"), (later, "b")]:
        message = definition_error(body)
        assert_names(message, step="a")
        assert f"'{missing}'" in message


@pytest.mark.parametrize("command", ["", "   ", "\n\t"])
def test_empty_command(command: str) -> None:
    def body():
        shell("blank", command=command)

    message = definition_error(body)
    assert_names(message, step="blank")
    assert "empty" in message


def test_empty_argv() -> None:
    def body():
        shell("blank", argv=[])

    message = definition_error(body)
    assert_names(message, step="blank")
    assert "argv" in message


def test_neither_or_both_of_command_and_argv() -> None:
    def both():
        shell("two", command="echo hi", argv=["echo", "hi"])

    def neither():
        shell("two")

    for body in (both, neither):
        message = definition_error(body)
        assert_names(message, step="two")
        assert "command" in message and "argv" in message


def test_bad_cron_expression() -> None:
    def body():
        ok("a")

    message = definition_error(body, triggers=[cron("61 * * * *")])
    assert_names(message)
    assert "61 * * * *" in message


def test_cron_expression_with_the_wrong_number_of_fields() -> None:
    def body():
        ok("a")

    message = definition_error(body, triggers=[cron("* * *")])
    assert_names(message)
    assert "* * *" in message


def test_bad_timezone() -> None:
    def body():
        ok("a")

    message = definition_error(body, triggers=[cron("0 9 * * *", timezone="Mars/Olympus_Mons")])
    assert_names(message)
    assert "Mars/Olympus_Mons" in message


def test_good_triggers_are_kept() -> None:
    @workflow(triggers=[cron("0 9 * * *", timezone="Europe/Bucharest"), webhook(secret_env="HOOK")])
    def scheduled():
        ok("a")

    assert [t.type for t in scheduled.triggers] == ["cron", "webhook"]


@pytest.mark.parametrize(
    ("command", "context"),
    [
        ("echo `cat {a}`", "backticks"),
        ("echo $'{a}'", "$'"),
        ("cat <<EOF\n{a}\nEOF", "here-document"),
        ("echo $(cat {a})", "unquoted $(…)"),
    ],
)
def test_placeholder_where_quoting_cannot_keep_it_data_in_a_shell_command(
        command: str, context: str) -> None:
    def body():
        ok("a")
        shell("quoted", command=command)

    message = definition_error(body)
    assert_names(message, step="quoted")
    assert "{a}" in message
    assert context in message


def test_placeholder_inside_quotes_written_with_an_f_string_runs_as_data() -> None:
    @workflow(name="quoted")
    def quoted():
        a = shell("a", command="printf '%s' 'it'\\''s \"$HOME\" `x` $(y) \\'")
        shell("dq", command=f'echo "result: {a}!"')
        shell("sq", command=f"echo 'result: {a}!'")

    result = quoted()
    assert result.succeeded, result.error
    value = result.steps["a"].output
    assert value == "it's \"$HOME\" `x` $(y) \\"
    assert result.steps["dq"].output == result.steps["sq"].output == f"result: {value}!"


def test_nested_parallel_blocks() -> None:
    def body():
        with parallel():
            ok("a")
            with parallel():
                ok("b")

    message = definition_error(body)
    assert_names(message)
    assert "parallel" in message and "nest" in message


def test_calling_a_workflow_while_tracing_another_records_a_child_step() -> None:
    @workflow
    def inner():
        ok("a")

    @workflow
    def outer():
        ok("first")
        inner()

    assert outer.graph.nodes == ("first", "inner")
    assert outer.spec.steps[1].kind == "workflow"
    assert outer.graph.edges == (("first", "inner"),)


def test_calling_run_on_a_workflow_while_tracing_another() -> None:
    @workflow
    def inner_run():
        ok("a")

    def body():
        inner_run.run()

    message = definition_error(body)
    assert_names(message)
    assert "'inner_run'" in message


def test_workflow_with_star_parameters() -> None:
    def star(text, *rest):
        ok("a")

    message = definition_error(star)
    assert_names(message)
    assert "*rest" in message


def test_workflow_parameters_become_placeholders() -> None:
    @workflow
    def defaults(text, greeting="hi"):
        shell("a", argv=["echo", greeting, text])

    assert defaults.spec.steps[0].argv == ("echo", "{params.greeting}", "{params.text}")
    assert defaults.params_schema["required"] == ["text"]


def test_helpers_outside_a_workflow() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"shell\(\)"):
        shell("loose", command="true")
    with pytest.raises(WorkflowDefinitionError, match=r"parallel\(\)"), parallel():
        pass


def _misuse_if(node):
    if node:
        pass


def _misuse_not(node):
    return not node


def _misuse_add(node):
    return node + "x"


def _misuse_radd(node):
    return "x" + node


def _misuse_method(node):
    return node.upper()


def _misuse_strip(node):
    return node.strip()


def _misuse_eq(node):
    return node == "x"


def _misuse_ne(node):
    return node != "x"


def _misuse_lt(node):
    return node < "x"


def _misuse_json(node):
    return json.dumps(node)


def _misuse_json_nested(node):
    return json.dumps({"list": [node]})


def _misuse_repr(node):
    return f"{node!r}"


def _misuse_format_spec(node):
    return f"{node:>5}"


def _misuse_len(node):
    return len(node)


def _misuse_index(node):
    return node[0]


def _misuse_in(node):
    return "x" in node


def _misuse_iter(node):
    return list(node)


def _misuse_int(node):
    return int(node)


def _misuse_percent(node):
    return node % 2


@pytest.mark.parametrize(
    "misuse",
    [_misuse_if, _misuse_not, _misuse_add, _misuse_radd, _misuse_method, _misuse_strip, _misuse_eq,
     _misuse_ne, _misuse_lt, _misuse_json, _misuse_json_nested, _misuse_repr, _misuse_format_spec,
     _misuse_len, _misuse_index, _misuse_in, _misuse_iter, _misuse_int, _misuse_percent],
    ids=lambda f: f.__name__.removeprefix("_misuse_"),
)
@pytest.mark.parametrize("kind", ["step-output", "trigger-field"])
def test_using_a_node_as_a_value_is_refused(misuse, kind: str) -> None:
    def body():
        node = ok("data") if kind == "step-output" else trigger.body
        misuse(node)
        ok("after")

    message = definition_error(body)
    assert_names(message)
    assert MISUSE in message


def test_the_misuse_message_names_the_step() -> None:
    def body():
        data = ok("data")
        data.upper()

    assert_names(definition_error(body), step="data")


def test_previous_naming_an_unknown_step() -> None:
    def body():
        shell("use", command="echo {previous.unknown}")

    message = definition_error(body)
    assert_names(message, step="use")
    assert "{previous.unknown}" in message


def test_previous_may_name_a_later_step_or_the_step_itself() -> None:
    @workflow
    def prev_later():
        shell("first", command="echo {previous.last} {previous.first}")
        ok("last")

    assert prev_later.graph.nodes == ("first", "last")
    assert edges(prev_later) == {("first", "last")}


def test_secret_inside_a_command_string() -> None:
    def body():
        shell("curl", command=f"curl -H 'X-Key: {secret('API_KEY')}' http://x")

    message = definition_error(body)
    assert_names(message)
    assert "secret" in message and "API_KEY" in message


def test_secret_as_the_whole_command() -> None:
    def body():
        shell("curl", command=secret("API_KEY"))

    message = definition_error(body)
    assert_names(message, step="curl")
    assert "secret" in message


@pytest.mark.parametrize("bad", ["has space", "dot.ted", "slash/ed", "brace{", "", "ünï"])
def test_bad_step_name_characters(bad: str) -> None:
    def body():
        ok(bad)

    message = definition_error(body)
    assert_names(message)
    assert repr(bad) in message


@pytest.mark.parametrize("good", ["a", "A_b-9", "2024-report", "__x__"])
def test_good_step_names(good: str) -> None:
    @workflow
    def good_names():
        ok(good)

    assert good_names.graph.nodes == (good,)


def test_unknown_trigger_attribute() -> None:
    def body():
        shell("a", argv=["echo", trigger.unknown])

    message = definition_error(body)
    assert_names(message)
    assert "trigger.unknown" in message


def test_bad_header_name() -> None:
    def body():
        shell("a", argv=["echo", trigger.headers["Bad Header"]])

    message = definition_error(body)
    assert_names(message)
    assert "Bad Header" in message


def test_decorating_records_steps_but_runs_nothing(tmp_path) -> None:
    marker = tmp_path / "ran"

    @workflow
    def lazy():
        shell("touch", argv=["touch", str(marker)])

    assert lazy.graph.nodes == ("touch",)
    assert not marker.exists()


# --- names -------------------------------------------------------------------------------


def test_workflow_name_defaults_to_the_function_name() -> None:
    @workflow
    def my_flow():
        """Says hello."""
        ok("a")

    assert my_flow.name == "my_flow"
    assert my_flow.description == "Says hello."


# --- where a definition error points -------------------------------------------------------


def _line_of(marker: str) -> int:
    """The line of this file that ends with the comment ``marker``."""
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


@pytest.mark.parametrize("case", ["helper", "misuse", "nested", "after_tracing"])
def test_a_definition_error_keeps_the_users_offending_line(case: str) -> None:
    """What ``brain check`` shows as FILE:LINE: the innermost frame of the user's code, even
    for errors the tracer re-raises with the workflow's name added."""
    from brain.loader import definition_site

    with pytest.raises(WorkflowDefinitionError) as info:
        if case == "helper":
            @workflow(name="located")
            def located():
                ok("a")
                shell("b", command="echo {nope}")  # helper
        elif case == "misuse":
            @workflow(name="located")
            def located():
                if ok("a"):  # misuse
                    ok("b")
        elif case == "nested":
            @workflow(name="located")
            def located():
                with parallel():
                    with parallel():  # nested
                        ok("a")
        else:
            @workflow(name="located")  # after_tracing
            def located():
                pass
    assert str(info.value).startswith("workflow 'located'")
    assert definition_site(info.value) == (__file__, _line_of(case))
