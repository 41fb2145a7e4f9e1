"""Random workflow definitions and edits of them, as source files (SPEC §24 tests).

A definition is a DAG of ``shell`` and ``@step`` steps (``after=`` makes the edges); half the
``@step`` functions return what a helper function of the module returns, so an edit of the
helper is an edit of the step. The steps are siblings of one ``parallel()`` block, so a step
waits for the steps of its ``after=`` and nothing else. :func:`source` writes it as a
workflow file named ``flow``; :func:`expected_change` says which step of a run a change
fails, by the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st


@dataclass(frozen=True)
class FlowStep:
    """One step: its name, kind (``shell`` or ``step``), the word it prints or returns,
    whether a ``@step`` returns it through a helper, and the steps it comes after."""

    name: str
    kind: str
    word: str
    helper: bool = False
    after: tuple[str, ...] = ()


Flow = tuple[FlowStep, ...]
WORDS = ("alpha", "beta", "gamma", "delta")


def source(flow: Flow) -> str:
    """The workflow file of ``flow`` (workflow ``flow``)."""
    lines = ["from brain import parallel, shell, step, workflow", ""]
    for s in flow:
        if s.kind == "step":
            if s.helper:
                lines += [f"def helper_{s.name}():", f"    return {s.word!r}", ""]
            body = f"helper_{s.name}()" if s.helper else repr(s.word)
            lines += [f"@step(name={s.name!r})", f"def fn_{s.name}() -> str:",
                      f"    return {body}", ""]
    # siblings in a parallel() block: a step waits for its after= alone, not its call order
    lines += ["@workflow", "def flow():", "    with parallel():"]
    for s in flow:
        after = f"after={list(s.after)!r}"
        if s.kind == "shell":
            lines.append(f"        shell({s.name!r}, command='echo {s.word}', {after})")
        else:
            lines.append(f"        fn_{s.name}.with_options({after})()")
    return "\n".join(lines) + "\n"


@st.composite
def flows(draw: st.DrawFn, min_size: int = 1, max_size: int = 6) -> Flow:
    """A random DAG of steps ``s0``, ``s1``... (each after some earlier ones)."""
    size = draw(st.integers(min_size, max_size))
    steps: list[FlowStep] = []
    for i in range(size):
        earlier = [s.name for s in steps]
        after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) \
            if earlier else []
        steps.append(FlowStep(f"s{i}", draw(st.sampled_from(("shell", "step"))),
                              draw(st.sampled_from(WORDS)), draw(st.booleans()),
                              tuple(sorted(after))))
    return tuple(steps)


@st.composite
def edits(draw: st.DrawFn, flow: Flow) -> Flow:
    """``flow`` after one to three random edits: a step's word or kind changed, a step
    added (after some existing ones, placed anywhere after them), a step removed (and
    dropped from the ``after=`` of others), a step's upstream changed."""
    steps = list(flow)
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(("word", "kind", "add", "remove", "upstream")))
        if what == "add" or not steps:
            at = draw(st.integers(0, len(steps)))
            earlier = [s.name for s in steps[:at]]
            after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) \
                if earlier else []
            name = f"n{draw(st.integers(0, 999))}"
            if name not in {s.name for s in steps}:
                steps.insert(at, FlowStep(name, draw(st.sampled_from(("shell", "step"))),
                                          draw(st.sampled_from(WORDS)), False,
                                          tuple(sorted(after))))
            continue
        i = draw(st.integers(0, len(steps) - 1))
        s = steps[i]
        if what == "word":
            steps[i] = replace(s, word=draw(st.sampled_from(WORDS)))
        elif what == "kind":
            steps[i] = replace(s, kind="step" if s.kind == "shell" else "shell")
        elif what == "remove" and len(steps) > 1:  # a workflow keeps a step
            del steps[i]
            steps = [replace(o, after=tuple(a for a in o.after if a != s.name)) for o in steps]
        elif what == "upstream":
            earlier = [o.name for o in steps[:i]]
            after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) \
                if earlier else []
            steps[i] = replace(s, after=tuple(sorted(after)))
    return tuple(steps)


def same_step(old: FlowStep, new: FlowStep | None) -> bool:
    """Whether a step does the same after the same steps in both definitions (a ``@step``
    returning its word through a helper or directly is different code)."""
    if new is None or old.kind != new.kind or old.word != new.word or old.after != new.after:
        return False
    return old.kind == "shell" or old.helper == new.helper


def expected_change(old: Flow, new: Flow, started: set[str]) -> str | None:
    """The first step of ``old`` (in its order) among ``started`` that ``new`` changed or
    removed; ``None`` when the run may go on."""
    by_name = {s.name: s for s in new}
    for s in old:
        if s.name in started and not same_step(s, by_name.get(s.name)):
            return s.name
    return None
