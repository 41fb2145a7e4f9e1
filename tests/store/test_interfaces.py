"""The store's narrow interfaces (brain.store.interfaces): ``Store`` has each of them, with
the same arguments, and together they are everything consumers call on a store.

mypy checks the types too (``_has_every_interface`` at the foot of brain/store/store.py);
these tests check what mypy does not see: the running object, the defaults, and the
calls consumers make.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, Generic, Protocol

import pytest

from brain.store import Store
from brain.store.interfaces import (
    ClaimStore,
    CostStore,
    HousekeepingStore,
    OpenableStore,
    ReadStore,
    RecordStore,
    RunStore,
    WaitStore,
)
from brain.store.urls import MEMORY_URL

BRAIN = Path(__file__).resolve().parents[2] / "brain"
NARROW = (OpenableStore, RecordStore, ClaimStore, WaitStore, ReadStore, HousekeepingStore,
          CostStore)
#: What a store has beyond its interfaces: its database, for tools and tests.
TOOLS = {"db", "dialect", "engine"}


def members(protocol: type) -> set[str]:
    """The names a protocol declares (its own and those it inherits from other protocols)."""
    return {name for cls in protocol.__mro__ if cls not in (object, Protocol, Generic)
            for name in vars(cls) if not name.startswith("_")}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


async def test_an_open_store_is_each_interface() -> None:
    async with Store(MEMORY_URL) as store:
        for protocol in (*NARROW, RunStore):
            assert isinstance(store, protocol), protocol.__name__


def test_something_that_is_not_a_store_is_none_of_them() -> None:
    for protocol in (*NARROW, RunStore):
        assert not isinstance(object(), protocol), protocol.__name__


@pytest.mark.parametrize("protocol", NARROW, ids=lambda p: p.__name__)
def test_each_method_takes_the_arguments_the_store_takes(protocol: type) -> None:
    """The same names, kinds and defaults; the store may take more options, with defaults
    (``open(check_schema=...)``)."""
    assert members(protocol), protocol.__name__
    for name in sorted(members(protocol)):
        declared, real = getattr(protocol, name), getattr(Store, name)
        if isinstance(declared, property):
            assert isinstance(real, property), name
            continue
        assert inspect.iscoroutinefunction(real) == inspect.iscoroutinefunction(declared), name
        real_params = {p: (v.kind, v.default)
                       for p, v in inspect.signature(real).parameters.items()}
        declared_params = {p: (v.kind, v.default)
                           for p, v in inspect.signature(declared).parameters.items()}
        assert {p: real_params.get(p) for p in declared_params} == declared_params, name
        for extra in set(real_params) - set(declared_params):
            assert real_params[extra][1] is not inspect.Parameter.empty, (name, extra)


def test_the_narrow_interfaces_do_not_overlap_and_together_are_the_store() -> None:
    seen: dict[str, str] = {}
    for protocol in NARROW:
        for name in members(protocol):
            assert name not in seen, f"{name} is in {seen.get(name)} and {protocol.__name__}"
            seen[name] = protocol.__name__
    assert set(seen) == public(Store) - TOOLS
    assert members(RunStore) == set(seen)


def store_calls() -> dict[str, set[str]]:
    """``{attribute: {module}}`` of what the code outside brain/store reads off a store:
    ``store.x``, ``self.store.x``, ``st.x`` and the like, where ``x`` is a name the store
    has."""
    names = public(Store)
    found: dict[str, set[str]] = {}
    for path in BRAIN.rglob("*.py"):
        if path.relative_to(BRAIN).parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute) or node.attr not in names:
                continue
            owner: Any = node.value
            owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if owner_name in ("store", "st", "_store") or owner_name.endswith("_store"):
                found.setdefault(node.attr, set()).add(str(path.relative_to(BRAIN)))
    return found


def test_the_interfaces_cover_every_call_consumers_make_on_a_store() -> None:
    calls = store_calls()
    # The scan finds calls from every layer that uses a store (the check is not empty).
    assert {"get_run", "step_finished", "take_next", "decide", "prune"} <= set(calls)
    covered = set().union(*(members(p) for p in NARROW))
    outside = {name: sorted(modules) for name, modules in calls.items() if name not in covered}
    assert outside == {}
