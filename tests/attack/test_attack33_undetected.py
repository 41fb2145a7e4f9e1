"""Attack (issue 33, SPEC §24 / docs/runs.md "Changing a workflow while runs are in
flight"): edits to a ``@step`` that already ran, made while its run waits, must fail the
run when it continues (``workflow changed since the run started: step 's' (...)``) — the
fingerprint covers the function's code, its default arguments and the code of the
functions and classes (methods, properties) of its module that it calls.

Each edit below changes what ``s`` does (its output for the same input), yet several are
not seen: the run goes on on the changed definition. The edits the docs list as misses
(values of globals, code in other modules, code reached through attributes of objects)
are not used here.
All fixed (brain/dsl/code_print.py): wrappers, annotations, defaults by value, bases,
descriptors, closures and parameter names now count.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from atk33_support import run_edits

from brain.results import RunResult, RunStatus
from brain.runner import WORKFLOW_CHANGED

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

DECORATOR = """
def scaled(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return {k} * fn(*args)
    return wrapper
"""

#: key -> (file before, file after, why the change is missed when it is)
EDITS: dict[str, tuple[str, str, str | None]] = {
    # --- seen before issue 33 too (regression tests) ---
    "helper_body": (
        "def h(x):\n    return x + 1\n@step\ndef s(n: int) -> int:\n    return h(n)\n",
        "def h(x):\n    return x + 2\n@step\ndef s(n: int) -> int:\n    return h(n)\n",
        None),
    "own_default": (
        "@step\ndef s(n: int, k: int = 1) -> int:\n    return n * k\n",
        "@step\ndef s(n: int, k: int = 3) -> int:\n    return n * k\n",
        None),
    "method": (
        "class C:\n    def f(self, x):\n        return x\n"
        "@step\ndef s(n: int) -> int:\n    return C().f(n)\n",
        "class C:\n    def f(self, x):\n        return -x\n"
        "@step\ndef s(n: int) -> int:\n    return C().f(n)\n",
        None),
    "lambda_helper": (
        "h = lambda x: x + 1\n@step\ndef s(n: int) -> int:\n    return h(n)\n",
        "h = lambda x: x + 5\n@step\ndef s(n: int) -> int:\n    return h(n)\n",
        None),
    "fstring_spec": (
        "@step\ndef s(n: int) -> str:\n    return f'{n:>4}'\n",
        "@step\ndef s(n: int) -> str:\n    return f'{n:<4}'\n",
        None),
    # --- missed before the fix (fixed: markers removed) ---
    "decorator_body": (
        DECORATOR.format(k=2) + "@step\n@scaled\ndef s(n: int) -> int:\n    return n\n",
        DECORATOR.format(k=3) + "@step\n@scaled\ndef s(n: int) -> int:\n    return n\n",
        None),
    "decorator_removed": (
        DECORATOR.format(k=2) + "@step\n@scaled\ndef s(n: int) -> int:\n    return n\n",
        DECORATOR.format(k=2) + "@step\ndef s(n: int) -> int:\n    return n\n",
        None),
    "helper_decorator": (
        DECORATOR.format(k=2) + "@scaled\ndef h(x):\n    return x\n"
        "@step\ndef s(n: int) -> int:\n    return h(n)\n",
        DECORATOR.format(k=-2) + "@scaled\ndef h(x):\n    return x\n"
        "@step\ndef s(n: int) -> int:\n    return h(n)\n",
        None),
    "annotation": (
        "@step\ndef s(n: int) -> str:\n    return str(n * 2)\n",
        "@step\ndef s(n: str) -> str:\n    return str(n * 2)\n",
        None),
    "function_default": (
        "def a(x):\n    return x\ndef b(x):\n    return -x\n"
        "@step\ndef s(n: int, f=a) -> int:\n    return f(n)\n",
        "def a(x):\n    return x\ndef b(x):\n    return -x\n"
        "@step\ndef s(n: int, f=b) -> int:\n    return f(n)\n",
        None),
    "helper_dict_default": (
        "def h(x, opts={'k': 1}):\n    return x + opts['k']\n"
        "@step\ndef s(n: int) -> int:\n    return h(n)\n",
        "def h(x, opts={'k': 9}):\n    return x + opts['k']\n"
        "@step\ndef s(n: int) -> int:\n    return h(n)\n",
        None),
    "inherited_method": (
        "class Base:\n    def f(self, x):\n        return x\n"
        "class Impl(Base):\n    pass\n"
        "@step\ndef s(n: int) -> int:\n    return Impl().f(n)\n",
        "class Base:\n    def f(self, x):\n        return x * 10\n"
        "class Impl(Base):\n    pass\n"
        "@step\ndef s(n: int) -> int:\n    return Impl().f(n)\n",
        None),
    "base_swapped": (
        "class A:\n    def f(self, x):\n        return x\n"
        "class B:\n    def f(self, x):\n        return -x\n"
        "class Impl(A):\n    pass\n"
        "@step\ndef s(n: int) -> int:\n    return Impl().f(n)\n",
        "class A:\n    def f(self, x):\n        return x\n"
        "class B:\n    def f(self, x):\n        return -x\n"
        "class Impl(B):\n    pass\n"
        "@step\ndef s(n: int) -> int:\n    return Impl().f(n)\n",
        None),
    "cached_property": (
        "class C:\n    @functools.cached_property\n    def v(self):\n        return 1\n"
        "@step\ndef s(n: int) -> int:\n    return n + C().v\n",
        "class C:\n    @functools.cached_property\n    def v(self):\n        return 7\n"
        "@step\ndef s(n: int) -> int:\n    return n + C().v\n",
        None),
    "closure_helper": (
        "def make():\n    def h(x):\n        return x\n"
        "    @step\n    def s(n: int) -> int:\n        return h(n)\n    return s\ns = make()\n",
        "def make():\n    def h(x):\n        return x * 4\n"
        "    @step\n    def s(n: int) -> int:\n        return h(n)\n    return s\ns = make()\n",
        None),
    "param_names_swapped": (
        "def h(a, b):\n    return a - b\n"
        "@step\ndef s(n: int) -> int:\n    return h(a=n, b=1)\n",
        "def h(b, a):\n    return b - a\n"
        "@step\ndef s(n: int) -> int:\n    return h(a=n, b=1)\n",
        None),
}

MISSED = {k for k, (_, _, why) in EDITS.items() if why is not None}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    tmp = tmp_path_factory.mktemp("atk33_undetected")
    return run_edits(tmp, {k: (a, b) for k, (a, b, _) in EDITS.items()})


def _cases() -> list[object]:
    out: list[object] = []
    for key, (_, _, why) in EDITS.items():
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(key, marks=marks, id=key))
    return out


@pytest.mark.parametrize("key", _cases())
def test_an_edit_of_a_step_that_ran_fails_the_waiting_run(results: dict[str, RunResult],
                                                           key: str) -> None:
    run = results[key]
    assert run.status == RunStatus.FAILED, (
        f"the run went on after {key!r} changed what step 's' does: {run.status}, "
        f"outputs {[(n, st.output) for n, st in run.steps.items()]}")
    assert run.error is not None and run.error.startswith(f"{WORKFLOW_CHANGED}: step 's' (")
    assert run.steps["after"].status != "succeeded"


def test_the_edits_change_what_the_step_does(tmp_path: Path) -> None:
    """Each pair of texts really gives ``s`` another output for the same input (so a run
    going on after the edit goes on with a step that no longer does what it did)."""
    import importlib.util

    from atk33_support import source

    for key, (before, after, _) in EDITS.items():
        outs = []
        for i, text in enumerate((before, after)):
            path = tmp_path / f"probe_{key}_{i}.py"
            path.write_text(source(key, text, tmp_path / "log"))
            spec = importlib.util.spec_from_file_location(f"probe_{key}_{i}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            fn = module.s.__wrapped__
            hint = getattr(fn, "__annotations__", {}).get("n")
            outs.append(fn(21 if hint in (int, "int") else "21"))
        assert outs[0] != outs[1], key
