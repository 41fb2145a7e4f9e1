"""SPEC §12: ``when`` conditions and ``for_each`` fan-out, run for real on SQLite (and the
instance rows on PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import kill_group_quietly, resume_once_expired, wait_for, write_source

from brain import WorkflowDefinitionError, for_each, parallel, shell, step, when, workflow
from brain.loader import load_file
from brain.results import RunStatus, StepStatus
from brain.store import Store
from brain.testing import run_workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@step
def says(text: str) -> str:
    return text


@step
def count_to(n: int) -> list[int]:
    return list(range(n))


def statuses(result: Any) -> dict[str, str]:
    return {name: s.status.value for name, s in result.steps.items()}


# --- conditions ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "runs"), [
    ("true", True), ("True\n", True), (" yes ", True), ("1", True),
    ("false", False), ("NO", False), ("0", False)])
def test_a_condition_runs_or_skips_its_steps(db_url: str, value: str, runs: bool) -> None:
    @workflow(name="cond")
    def cond():
        flag = says(value)
        with when(flag):
            shell("inside", argv=["echo", "in"])
        shell("negated", argv=["echo", "not"], when=~flag)
        shell("always", argv=["echo", "always"])

    r = cond.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert r.steps["inside"].status == (StepStatus.SUCCEEDED if runs else StepStatus.SKIPPED)
    assert r.steps["negated"].status == (StepStatus.SKIPPED if runs else StepStatus.SUCCEEDED)
    assert r.steps["always"].output == "always"
    skipped = [s for s in r.steps.values() if s.status == StepStatus.SKIPPED]
    assert all(s.output is None and s.tries == 0 for s in skipped)
    reasons = {s.name: s.error for s in skipped}
    assert reasons == ({"negated": "condition not {says} is true"} if runs
                       else {"inside": "condition {says} is false"})


def test_a_bool_returning_step_is_a_condition(db_url: str) -> None:
    @step
    def is_main(ref: str) -> bool:
        return ref == "refs/heads/main"

    @workflow(name="bools")
    def bools():
        main = is_main("refs/heads/main")
        other = is_main.with_options(name="other")("refs/heads/dev")
        shell("deploy", argv=["echo", "deploy"], when=main)
        shell("preview", argv=["echo", "preview"], when=other)

    r = bools.run(store=db_url)
    assert r.steps["is_main"].output == "true" and r.steps["other"].output == "false"
    assert r.steps["deploy"].status == StepStatus.SUCCEEDED
    assert r.steps["preview"].status == StepStatus.SKIPPED


@pytest.mark.parametrize("value", ["maybe", "", "2", "true false", "✓"])
def test_a_condition_that_is_not_true_or_false_fails_the_conditioned_step(
        db_url: str, value: str) -> None:
    @workflow(name="bad_cond")
    def bad_cond():
        flag = says(value)
        shell("guarded", argv=["echo", "x"], when=flag)
        shell("later", argv=["echo", "y"])

    r = bad_cond.run(store=db_url)
    assert r.status == RunStatus.FAILED
    assert r.steps["guarded"].status == StepStatus.FAILED
    assert "condition {says}" in (r.steps["guarded"].error or "")
    assert repr(value) in (r.steps["guarded"].error or "")
    assert r.steps["later"].status == StepStatus.SKIPPED


def test_skipping_follows_data_edges_but_not_order_edges(db_url: str) -> None:
    @workflow(name="edges")
    def edges():
        no = says("false")
        gone = shell("gone", argv=["echo", "gone"], when=no)
        reads = says.with_options(name="reads")(gone)              # data edge: skipped
        shell("reads_too", argv=["echo", f"{reads}"])               # transitively
        shell("ordered", argv=["echo", "ordered"])                  # call order: runs
        shell("waits", argv=["echo", "waits"], after=[gone, reads])  # after=: runs

    r = edges.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert statuses(r) == {"says": "succeeded", "gone": "skipped", "reads": "skipped",
                           "reads_too": "skipped", "ordered": "succeeded", "waits": "succeeded"}
    assert r.steps["reads"].error == "{gone} was skipped"
    assert r.steps["reads_too"].error == "{reads} was skipped"


def test_nested_conditions_and_together_and_parallel_works_inside(db_url: str,
                                                                   tmp_path: Path) -> None:
    @workflow(name="nested")
    def nested():
        yes = says("yes")
        no = says.with_options(name="no")("no")
        with when(yes):
            with parallel():
                shell("a", command="sleep 0.3; echo a")
                shell("b", command="sleep 0.3; echo b")
            with when(no):
                shell("both", argv=["echo", "both"])
            with when(~no):
                shell("yes_not_no", argv=["echo", "ok"])

    r = nested.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert statuses(r) == {"says": "succeeded", "no": "succeeded", "a": "succeeded",
                           "b": "succeeded", "both": "skipped", "yes_not_no": "succeeded"}
    a, b = r.steps["a"], r.steps["b"]
    assert a.started_at is not None and b.started_at is not None and a.ended_at and b.ended_at
    assert a.started_at < b.ended_at and b.started_at < a.ended_at, "parallel() inside when"


def test_a_condition_that_was_itself_skipped_skips_its_steps(db_url: str) -> None:
    @workflow(name="chain_skip")
    def chain_skip():
        no = says("false")
        inner = says.with_options(name="inner", when=no)("true")
        shell("guarded", argv=["echo", "x"], when=inner)

    r = chain_skip.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED
    assert r.steps["inner"].status == StepStatus.SKIPPED
    assert r.steps["guarded"].status == StepStatus.SKIPPED


# --- for_each --------------------------------------------------------------------------


def test_for_each_runs_each_instance_and_gives_the_list_after_the_block(db_url: str) -> None:
    @step
    def items() -> list[Any]:
        return ["a b", {"k": 1}, 3, "ünï"]

    @workflow(name="fan")
    def fan():
        xs = items()
        with for_each(xs, max_parallel=2, name="x") as x:
            first = shell("echoed", argv=["echo", f"<{x}>"])
            says.with_options(name="again")(f"{first}!")
        shell("all", argv=["echo", f"{first}"])

    r = fan.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    outputs = ["<a b>", '<{"k":1}>', "<3>", "<ünï>"]
    assert [r.steps[f"echoed[{i}]"].output for i in range(4)] == outputs
    assert [r.steps[f"again[{i}]"].output for i in range(4)] == [o + "!" for o in outputs]
    assert json.loads(r.steps["echoed"].output or "") == outputs
    assert json.loads(r.steps["all"].output or "") == outputs
    assert list(r.steps) == ["items", "echoed", *[f"echoed[{i}]" for i in range(4)],
                             "again", *[f"again[{i}]" for i in range(4)], "all"]


def test_two_hundred_elements_never_run_more_than_max_parallel_at_once(db_url: str) -> None:
    state = {"now": 0, "most": 0, "done": 0}

    @step
    async def busy(item: str) -> str:
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.005)
        state["now"] -= 1
        state["done"] += 1
        return item

    @workflow(name="wide")
    def wide():
        with for_each(count_to(200), max_parallel=8) as n:
            busy(n)

    r = wide.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert state["done"] == 200
    assert state["most"] == 8, state
    assert json.loads(r.steps["busy"].output or "") == [str(i) for i in range(200)]


def test_an_empty_list_runs_no_instance_and_gives_an_empty_array(db_url: str) -> None:
    @workflow(name="empty")
    def empty():
        with for_each(count_to(0)) as n:
            each = shell("each", argv=["echo", f"{n}"])
        shell("after", argv=["echo", f"{each}"])

    r = empty.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert r.steps["each"].output == "[]"
    assert r.steps["after"].output == "[]"
    assert not any("[" in name for name in r.steps)


def test_more_than_a_thousand_elements_fail_the_block_clearly(db_url: str) -> None:
    @workflow(name="huge")
    def huge():
        with for_each(count_to(1001)) as n:
            shell("each", argv=["echo", f"{n}"])
        shell("after", argv=["echo", "after"])

    r = huge.run(store=db_url)
    assert r.status == RunStatus.FAILED
    assert r.steps["each"].status == StepStatus.FAILED
    assert "1001 elements, at most 1000" in (r.steps["each"].error or "")
    assert r.steps["after"].status == StepStatus.SKIPPED
    assert not any("[" in name for name in r.steps)

    def literal() -> None:
        with for_each(list(range(1001))):
            shell("each", argv=["echo", "x"])

    with pytest.raises(WorkflowDefinitionError, match="1001 elements"):
        workflow(name="huge_literal")(literal)


@pytest.mark.parametrize("output", ['{"a": 1}', "not json", "3", '"text"'])
def test_output_that_is_not_a_json_array_fails_the_block(db_url: str, output: str) -> None:
    @workflow(name="notarray")
    def notarray():
        with for_each(says(output)) as n:
            shell("each", argv=["echo", f"{n}"])

    r = notarray.run(store=db_url)
    assert r.status == RunStatus.FAILED
    assert "is not a JSON array" in (r.steps["each"].error or "")


def test_a_failing_instance_halts_the_run_and_cancels_running_siblings(db_url: str,
                                                                       tmp_path: Path) -> None:
    @workflow(name="halts")
    def halts():
        with for_each(count_to(6), max_parallel=3) as n:
            shell("work", timeout_seconds=60, cwd=str(tmp_path),
                  command=f"if [ {n} = 1 ]; then sleep 0.5; exit 3; fi; "
                          f"touch started-{n}; sleep 30; touch finished-{n}")
        shell("after", argv=["echo", "after"])

    r = halts.run(store=db_url)
    # The siblings sleep 30 s before they finish: stopped, none of them did.
    assert not list(tmp_path.glob("finished-*")), "the siblings were not stopped"
    assert r.status == RunStatus.FAILED
    assert "'work[1]' failed" in (r.error or "")
    states = {i: r.steps[f"work[{i}]"].status for i in range(6)}
    assert states[1] == StepStatus.FAILED
    assert states[0] == states[2] == StepStatus.CANCELLED
    assert {states[i] for i in (3, 4, 5)} <= {StepStatus.SKIPPED, StepStatus.CANCELLED}
    assert all(s.status not in (StepStatus.PENDING, StepStatus.RUNNING) for s in r.steps.values())
    assert not list(tmp_path.glob("finished-*"))
    assert r.steps["after"].status == StepStatus.SKIPPED
    assert r.steps["work"].status == StepStatus.FAILED
    assert (r.steps["work"].error or "").startswith("work[1] failed: ")


def test_a_condition_around_a_block_that_is_not_true_or_false_fails_it_once(db_url: str) -> None:
    @workflow(name="bad_around")
    def bad_around():
        flag = says("perhaps")
        numbers = count_to(3)
        with when(flag), for_each(numbers) as n:
            shell("each", argv=["echo", f"{n}"])

    r = bad_around.run(store=db_url)
    assert r.status == RunStatus.FAILED
    assert r.steps["each"].status == StepStatus.FAILED
    assert "condition {says} is 'perhaps'" in (r.steps["each"].error or "")
    assert not any(name.startswith("each[") for name in r.steps)


def test_when_inside_a_block_decides_per_instance_and_around_it_for_all(db_url: str) -> None:
    @step
    def even(n: int) -> bool:
        return n % 2 == 0

    @workflow(name="per_instance")
    def per_instance():
        no = says("no")
        with for_each(count_to(4)) as n:
            e = even(n)
            shell("only_even", argv=["echo", f"{n}"], when=e)
        with when(no):
            with for_each(count_to(3)) as m:
                shell("never", argv=["echo", f"{m}"])

    r = per_instance.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert [r.steps[f"only_even[{i}]"].status for i in range(4)] == [
        StepStatus.SUCCEEDED, StepStatus.SKIPPED, StepStatus.SUCCEEDED, StepStatus.SKIPPED]
    assert json.loads(r.steps["only_even"].output or "") == ["0", None, "2", None]
    assert r.steps["never"].status == StepStatus.SKIPPED
    assert not any(name.startswith("never[") for name in r.steps)


def test_mocks_by_step_name_apply_to_every_instance_with_its_index() -> None:
    @workflow(name="mocked_fan")
    def mocked_fan():
        with for_each(["x", "y", "z"], name="letter") as letter:
            shell("shout", argv=["shout", f"{letter}"])
        shell("joined", argv=["join"])

    r = run_workflow(mocked_fan, mocks={
        "shout": lambda call: call.inputs["argv"][1].upper() + str(call.index),
        "joined": "done"}, strict=True)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert [r.steps[f"shout[{i}]"].output for i in range(3)] == ["X0", "Y1", "Z2"]
    calls = r.calls["shout"]
    assert sorted(c.index for c in calls if c.index is not None) == [0, 1, 2]
    assert {c.name for c in calls} == {"shout"} and all(c.try_number == 1 for c in calls)


FANOUT_CRASH = """
    from brain import for_each, shell, workflow

    @workflow
    def fanout():
        with for_each(["a", "b", "c", "d", "e", "f"], max_parallel=2) as x:
            shell("mark", command=f"echo {x} >> ran-{x}.txt; echo marked-{x}")
            shell("slow", timeout_seconds=300,
                  command=f"if [ {x} = c ] && [ ! -e marker ]; then echo $$ > slow.pid; "
                          f"touch marker; sleep 60; fi; echo slow-{x} >> slow-ran.txt; "
                          f"echo slow-{x}")
"""


def test_kill_9_in_the_middle_of_a_block_then_resume_runs_only_unfinished_instances(
        tmp_path: Path, db_url: str, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "fanout.py", FANOUT_CRASH)
    env = {**os.environ, "BRAIN_LEASE_SECONDS": "2"}
    proc = subprocess.Popen([*brain_cmd, "run", str(flow)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "slow.pid"
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30,
                 "instance c to start its slow step")
        time.sleep(0.5)  # let the other running instance get ahead
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        ran_before = {p.name: p.read_text() for p in tmp_path.glob("ran-*.txt")}
        slow_before = (tmp_path / "slow-ran.txt").read_text().splitlines() \
            if (tmp_path / "slow-ran.txt").exists() else []
        wf = load_file(flow)["fanout"]

        async def resume() -> Any:
            async with Store(db_url) as store:
                run_id = (await store.list_runs(limit=1))[0].run_id
                before = await store.get_run(run_id)
                return before, await resume_once_expired(wf, store, run_id)

        before, result = asyncio.run(resume())
        assert before.status == RunStatus.RUNNING
        assert before.steps["mark[2]"].status == StepStatus.SUCCEEDED
        assert before.steps["slow[2]"].status == StepStatus.RUNNING
        finished_before = {n for n, s in before.steps.items()
                           if "[" in n and s.status == StepStatus.SUCCEEDED}
        assert result is not None and result.status == RunStatus.SUCCEEDED, result
        # every instance's steps ran exactly once overall, however the crash split them
        for x in "abcdef":
            assert (tmp_path / f"ran-{x}.txt").read_text().splitlines() == [x]
        slow_all = (tmp_path / "slow-ran.txt").read_text().splitlines()
        assert sorted(slow_all) == [f"slow-{x}" for x in "abcdef"]
        assert slow_all[:len(slow_before)] == slow_before
        assert all(result.steps[n].tries == 1 for n in finished_before)
        assert result.steps["slow[2]"].tries == 2
        assert json.loads(result.steps["slow"].output or "") == [f"slow-{x}" for x in "abcdef"]
        assert ran_before  # the crash came after some instances had run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid_file.exists() and pid_file.read_text().strip():
            kill_group_quietly(int(pid_file.read_text()))


def test_instance_rows_on_postgresql(pg_url: str) -> None:
    """The instance rows are added (and re-added on resume without duplicates) on PostgreSQL."""
    import uuid

    name = f"pgfan_{uuid.uuid4().hex[:8]}"

    @workflow(name=name)
    def pgfan():
        with for_each(count_to(5), max_parallel=5) as n:
            shell("each", argv=["echo", f"{n}"])

    async def go() -> Any:
        store = Store(pg_url)
        await store.upgrade_schema()
        try:
            result = await pgfan.arun(store=store)
            await store.add_steps(result.run_id, [("each[0]", "shell", 1)])  # no duplicate
            return result, await store.get_run(result.run_id)
        finally:
            await store.close()

    result, again = asyncio.run(go())
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert [again.steps[f"each[{i}]"].output for i in range(5)] == [str(i) for i in range(5)]
    assert again.steps["each[0]"].status == StepStatus.SUCCEEDED


# --- definition errors -----------------------------------------------------------------


def _refused(fn: Any, match: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=match):
        workflow(name="refused")(fn)


def test_misuse_is_a_definition_error() -> None:
    from brain import trigger

    def condition_is_text() -> None:
        shell("a", argv=["echo"], when="true")

    def condition_is_a_trigger_field() -> None:
        with when(trigger.body):
            shell("a", argv=["echo"])

    def over_text() -> None:
        with for_each("a,b"):
            shell("a", argv=["echo"])

    def nested() -> None:
        with for_each([1, 2]), for_each([3]):
            shell("a", argv=["echo"])

    def each_outside() -> None:
        shell("a", argv=["echo", "{each.item}"])

    def wrong_each_name() -> None:
        with for_each([1], name="n"):
            shell("a", argv=["echo", "{each.item}"])

    def condition_on_a_list_after_the_block() -> None:
        with for_each([1]):
            flag = says("true")
        shell("b", argv=["echo"], when=flag)

    def bad_max_parallel() -> None:
        with for_each([1], max_parallel=0):
            shell("a", argv=["echo"])

    _refused(condition_is_text, "when takes the output of an earlier step")
    _refused(condition_is_a_trigger_field, "not a trigger field")

    def condition_is_previous() -> None:
        flag = says("true")
        shell("a", argv=["echo"], when=flag.previous)

    _refused(condition_is_previous, r"not an output of the previous run \(.previous\)")
    _refused(over_text, "for_each takes a list or the output of an earlier step")
    _refused(nested, "cannot be nested")
    _refused(each_outside, r"\{each.item\} is used outside")
    _refused(wrong_each_name, r"this block's element is \{each.n\}")
    _refused(condition_on_a_list_after_the_block, "after the block its output is a list")
    _refused(bad_max_parallel, "max_parallel= must be a whole number >= 1")


def test_brain_check_reports_misuse_in_a_file(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "misuse.py", """
        from brain import for_each, shell, workflow

        @workflow
        def misuse():
            with for_each([1, 2]):
                with for_each([3]):
                    shell("a", argv=["echo"])
    """)
    result = subprocess.run([*brain_cmd, "check", str(flow)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result
    assert "for_each blocks cannot be nested" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_the_graph_shows_conditions_and_blocks(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "shown.py", """
        from brain import for_each, shell, step, when, workflow

        @step
        def flag() -> bool:
            return True

        @workflow
        def shown():
            f = flag()
            with when(f):
                with for_each(["a", "b"], max_parallel=3) as x:
                    shell("each", argv=["echo", f"{x}"])
    """)
    wf = load_file(flow)["shown"]
    assert wf.graph.conditions == {"each": ("{flag}",)}
    assert [(g.label, g.steps, g.max_parallel) for g in wf.graph.groups] == [
        ("for_each [2 items]", ("each",), 3)]
    out = subprocess.run([*brain_cmd, "graph", f"{flow}:shown", "--mermaid"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'subgraph g0["for_each [2 items], 3 at a time"]' in out.stdout
    assert "s_flag -. when .-> s_each" in out.stdout


# --- found by the review -----------------------------------------------------------------


def test_a_retry_of_a_run_with_skipped_instances_ends_with_every_row_final(
        tmp_path: Path) -> None:
    from brain.runner import execute_run

    fixed = tmp_path / "fixed"

    @step
    def even(n: int) -> bool:
        return n % 2 == 0

    @workflow(name="retry_skipped")
    def retry_skipped():
        with for_each(count_to(3)) as n:
            shell("cmd", argv=["echo", f"{n}"], when=even(n))
        shell("last", command=f"test -e {fixed} && echo {{previous.last}}-done")

    url = f"sqlite:///{tmp_path / 'r.db'}"

    async def go() -> Any:
        async with Store(url) as store:
            first = await retry_skipped.arun(store=store)
            assert first.status == RunStatus.FAILED
            assert first.steps["cmd[1]"].status == StepStatus.SKIPPED
            fixed.touch()
            ok = await retry_skipped.arun(store=store)  # a succeeded run the retry must ignore
            assert ok.steps["last"].output == "-done"
            retry_id = await store.retry_run(first.run_id,
                                             definition_hash=retry_skipped.definition_hash)
            return await execute_run(retry_skipped, store, retry_id)

    again = asyncio.run(go())
    assert again.status == RunStatus.SUCCEEDED, again.error
    assert {s.status for s in again.steps.values()} <= {StepStatus.SUCCEEDED, StepStatus.SKIPPED}
    assert again.steps["cmd[1]"].status == StepStatus.SKIPPED
    # the original chose no previous run: its retry reads none either
    assert again.steps["last"].output == "-done"


def test_a_skipped_step_outside_a_block_skips_the_block_steps_that_read_it(db_url: str) -> None:
    @workflow(name="outside_skip")
    def outside_skip():
        no = says("false")
        gone = shell("gone", argv=["echo", "gone"], when=no)
        with for_each(count_to(2)) as n:
            reads = shell("reads", argv=["echo", f"{gone}-{n}"])
            shell("own", argv=["echo", f"{n}"])
        shell("after", argv=["echo", f"got {reads}"])

    r = outside_skip.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert r.steps["reads"].status == StepStatus.SKIPPED
    assert r.steps["reads"].error == "{gone} was skipped"
    assert r.steps["after"].status == StepStatus.SKIPPED
    assert r.steps["own"].status == StepStatus.SUCCEEDED
    assert r.steps["own"].output == '["0","1"]'


def test_an_element_is_only_for_its_own_block() -> None:
    def negated() -> None:
        with for_each([1, 2]) as n:
            shell("a", argv=["echo"], when=~n)

    def stale() -> None:
        with for_each([1, 2]) as first:
            shell("a", argv=["echo", f"{first}"])
        with for_each([3, 4]):
            shell("b", argv=["echo", f"{first}"])

    _refused(negated, "an element is not one")
    _refused(stale, "used outside that block")
