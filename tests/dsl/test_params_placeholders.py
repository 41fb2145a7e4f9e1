"""Parameters while tracing: each is a lazy value whose text is ``{params.NAME}``; it stands
wherever a trigger field may (with the same shell-safety rules), in ``when=``, as a
``for_each`` list, as a ``@step`` argument (kept typed), in ``concurrency_key``; schedules
supply parameters and triggers that cannot supply a required one are refused; a workflow's
return value is recorded as an output template.
"""

from typing import Literal

import pytest
from pydantic import BaseModel
from support import definition_error

from brain import (
    cron,
    every,
    for_each,
    llm,
    mcp_tool,
    shell,
    step,
    trigger,
    watch,
    webhook,
    when,
    workflow,
)
from brain.dsl.model import ParamRef


class Target(BaseModel):
    host: str
    port: int = 22


@step
def use(value: object) -> str:
    return str(value)


def test_a_parameter_is_its_placeholder_wherever_a_trigger_field_may_stand() -> None:
    @workflow
    def everywhere(service: str, target: Target = Target(host="h")):
        shell("cmd", command=f"deploy {service} --host {target.host} > /tmp/{service}.log")
        shell("argv", argv=["deploy", service, f"--port={target.port}"],
              stdin=f"{service}\n", env={"SERVICE": service})
        llm("ask", prompt=f"About {service}", system=f"{target}", model="m")
        mcp_tool("tool", server_command=f"python -m srv {service}", tool="t",
                 args={"q": service, "n": 3}, env={"S": f"{service}"})

    cmd, argv, ask, tool = everywhere.spec.steps
    assert cmd.command == ("deploy {params.service} --host {params.target.host} > "
                           "/tmp/{params.service}.log")
    assert argv.argv == ("deploy", "{params.service}", "--port={params.target.port}")
    assert (argv.stdin, argv.env) == ("{params.service}\n", {"SERVICE": "{params.service}"})
    assert (ask.prompt, ask.system) == ("About {params.service}", "{params.target}")
    assert tool.server_command == ("python", "-m", "srv", "{params.service}")
    assert tool.args == {"q": "{params.service}", "n": 3}
    # Parameters are not steps: no edges come from them.
    assert everywhere.graph.edges == (("cmd", "argv"), ("argv", "ask"), ("ask", "tool"))


def test_plain_strings_with_params_placeholders_work_too() -> None:
    @workflow
    def plain(service: str):
        shell("a", argv=["echo", "{params.service}", "{{params.service}}"])

    assert plain.spec.steps[0].argv == ("echo", "{params.service}", "{{params.service}}")


@pytest.mark.parametrize("command", [
    "eval {params.service}", "sh -c {params.service}", "n={params.service}",
    "{params.service} --help", "echo `echo {params.service}`", "echo $(( {params.service} ))",
    "xargs {params.service}", "cat <<EOF\n{params.service}\nEOF", "echo x # {params.service}",
])
def test_shell_safety_refuses_parameters_where_it_refuses_trigger_fields(command: str) -> None:
    def unsafe(service: str):
        shell("a", command=command)

    def unsafe_trigger():
        shell("a", command=command.replace("{params.service}", "{trigger.body}"))

    message = definition_error(unsafe)
    assert "'a'" in message
    assert definition_error(unsafe_trigger).split(": ", 2)[-1] == \
        message.split(": ", 2)[-1].replace("{params.service}", "{trigger.body}")


def test_a_parameter_as_the_program_is_refused() -> None:
    def program(service: str):
        shell("a", argv=[service, "x"])

    def server(service: str):
        mcp_tool("m", server_command=f"{service} --stdio", tool="t")

    assert "'a'" in definition_error(program)
    assert "'m'" in definition_error(server)


def test_when_takes_bool_parameters_and_their_negation() -> None:
    @workflow
    def conditioned(dry_run: bool = False, verbose: bool | None = None):
        shell("plan", argv=["echo", "plan"])
        shell("apply", argv=["echo", "apply"], when=~dry_run)
        with when(verbose):
            shell("talk", argv=["echo", "talk"])

    _, apply, talk = conditioned.spec.steps
    assert [c.describe() for c in apply.when] == ["not {params.dry_run}"]
    assert [c.describe() for c in talk.when] == ["{params.verbose}"]
    assert apply.upstream == ("plan",)  # a parameter is not a step to wait for
    assert conditioned.graph.conditions == {"apply": ("not {params.dry_run}",),
                                            "talk": ("{params.verbose}",)}


def test_when_on_a_parameter_that_is_not_a_bool_is_refused() -> None:
    def text_condition(service: str):
        shell("a", argv=["echo"], when=service)

    assert "when takes a bool parameter" in definition_error(text_condition)


def test_for_each_over_a_list_parameter() -> None:
    @workflow
    def fan(files: list[str]):
        shell("first", argv=["echo"])
        with for_each(files, max_parallel=2) as f:
            shell("each", argv=["echo", f"{f}"])

    group = fan.spec.groups[0]
    assert (group.items, group.items_step) == ("{params.files}", "params.files")
    assert fan.spec.steps[1].upstream == ("first",)


def test_for_each_over_a_parameter_that_is_not_a_list_is_refused() -> None:
    def fan(count: int = 3):
        with for_each(count) as f:
            shell("each", argv=["echo", f"{f}"])

    assert "not a list" in definition_error(fan)


def test_step_arguments_keep_parameters_typed() -> None:
    @workflow
    def typed(target: Target, n: int = 1):
        use([target, {"n": n}, f"text {n}"])
        use(target.host)

    first, second = typed.spec.steps
    assert first.arguments["value"] == [ParamRef(path=("target",)), {"n": ParamRef(path=("n",))},
                                        "text {params.n}"]
    assert second.arguments["value"] == ParamRef(path=("target", "host"))


def test_concurrency_key_may_hold_parameters() -> None:
    @workflow(max_concurrent_runs=1, concurrency_key="{params.service}-{trigger.headers.x-env}")
    def keyed(service: str = "api"):
        shell("a", argv=["echo"])

    def unknown():
        shell("a", argv=["echo"])

    assert keyed.spec.concurrency_key == "{params.service}-{trigger.headers.x-env}"
    message = definition_error(unknown, max_concurrent_runs=1, concurrency_key="{params.nope}")
    assert "does not name a parameter" in message


def test_a_parameter_node_as_concurrency_key_is_its_placeholder() -> None:
    # The decorator's arguments are evaluated before the function exists, so a node can only
    # come from a placeholder string; a TriggerField works as before.
    @workflow(max_concurrent_runs=1, concurrency_key=trigger.headers["X-Repo"])
    def by_repo(service: str = "api"):
        shell("a", argv=["echo", service])

    assert by_repo.spec.concurrency_key == "{trigger.headers.x-repo}"


# --- triggers ---------------------------------------------------------------------------------


def test_schedules_supply_parameters_validated_at_definition() -> None:
    @workflow(triggers=[cron("0 6 * * *", params={"service": "api", "env": "prod"}),
                        every(60, params={"service": "db"}), webhook(secret_env="S")])
    def scheduled(service: str, env: Literal["staging", "prod"] = "staging"):
        shell("a", argv=["echo", service, env])

    cron_trigger, every_trigger, _ = scheduled.triggers
    assert cron_trigger.params == {"service": "api", "env": "prod"}
    assert every_trigger.params == {"service": "db"}
    # Two schedules that differ only in their parameters are two triggers.
    assert cron_trigger.key() != cron("0 6 * * *").key()


@pytest.mark.parametrize("trig", [cron("0 6 * * *"), every(60),
                                  cron("0 6 * * *", params={"env": "dev"}),
                                  every(60, params={"service": 5}),
                                  every(60, params={"service": "a", "extra": 1})])
def test_a_schedule_that_cannot_supply_valid_parameters_is_refused(trig: object) -> None:
    def scheduled(service: str, env: Literal["staging", "prod"] = "staging"):
        shell("a", argv=["echo", service, env])

    message = definition_error(scheduled, triggers=[trig])
    assert "does not supply valid parameters" in message


def test_a_watch_cannot_supply_required_parameters() -> None:
    def watched(service: str):
        shell("a", argv=["echo", service])

    @workflow(triggers=[watch("/tmp")])
    def watched_with_defaults(service: str = "api"):
        shell("a", argv=["echo", service])

    assert "watch trigger cannot supply the required parameters service" in \
        definition_error(watched, triggers=[watch("/tmp")])
    assert watched_with_defaults.triggers[0].type == "watch"


def test_webhooks_and_manual_runs_may_have_required_parameters() -> None:
    @workflow(triggers=[webhook(secret_env="S")])
    def hooked(service: str):
        shell("a", argv=["echo", service])

    assert hooked.spec.params.required == ("service",)


def test_schedule_params_must_be_a_json_dict() -> None:
    with pytest.raises(TypeError, match="params= takes a dict"):
        cron("0 6 * * *", params=["api"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not JSON"):
        every(60, params={"when": object()})


def test_a_failure_handler_with_required_parameters_is_refused() -> None:
    @workflow
    def handler(service: str):
        shell("a", argv=["echo", service])

    def failing():
        shell("a", argv=["false"])

    assert "on_failure handler 'handler' has required parameters (service)" in \
        definition_error(failing, on_failure=[handler])


# --- the returned value -------------------------------------------------------------------------


def test_the_return_value_is_recorded_as_an_output_template() -> None:
    @workflow
    def returns(service: str, target: Target = Target(host="h")) -> dict:
        plan = shell("plan", argv=["echo", service])
        return {"plan": plan, "service": service, "host": target.host, "list": [plan, 1, None]}

    assert returns.spec.output == {"dict": {
        "plan": {"step": "plan"}, "service": {"param": ["service"]},
        "host": {"param": ["target", "host"]},
        "list": {"list": [{"step": "plan"}, {"value": 1}, {"value": None}]}}}


def test_no_return_is_no_output() -> None:
    @workflow
    def silent():
        shell("a", argv=["echo"])

    assert silent.spec.output is None


def test_returning_something_else_is_refused() -> None:
    def returns_object():
        shell("a", argv=["echo"])
        return object()

    def returns_trigger():
        shell("a", argv=["echo"])
        return trigger.body

    def returns_previous():
        a = shell("a", argv=["echo"])
        return a.previous

    for body in (returns_object, returns_trigger, returns_previous):
        assert "a workflow returns a step's output, a parameter" in definition_error(body)


def test_the_returned_value_counts_in_the_definition_hash() -> None:
    def body() -> None:
        shell("a", argv=["echo"])

    def body_returning():
        a = shell("a", argv=["echo"])
        return a

    plain = workflow(name="same")(body)
    returning = workflow(name="same")(body_returning)
    assert plain.definition_hash != returning.definition_hash
