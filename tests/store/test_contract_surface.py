"""The store contract's surface: the test double has every method of the real store, and
the contract suite tests every one of them (a method added later without a contract test
fails here)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from brain.store import Store
from brain.store.base import RunStore
from brain.store.memory import MemoryStore

#: What only a SQL store has: its database, and the schema upgrade of ``brain db upgrade``.
SQL_ONLY = {"db", "dialect", "engine", "upgrade_schema"}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_memory_store_has_every_method_of_the_real_store() -> None:
    assert public(Store) - SQL_ONLY - public(MemoryStore) == set()
    assert public(MemoryStore) - public(Store) == set()
    assert {n for n, _ in inspect.getmembers(RunStore) if not n.startswith("_")} <= public(
        MemoryStore)


def test_the_same_methods_take_the_same_arguments() -> None:
    """The same names, kinds and defaults; the real store may take more options, with
    defaults (``open(check_schema=...)``)."""
    for name in sorted(public(Store) - SQL_ONLY):
        real, double = getattr(Store, name), getattr(MemoryStore, name)
        if isinstance(real, property):
            assert isinstance(double, property), name
            continue
        real_params = {p: (v.kind, v.default) for p, v in inspect.signature(real).parameters.items()}
        double_params = {p: (v.kind, v.default)
                         for p, v in inspect.signature(double).parameters.items()}
        assert {p: real_params.get(p) for p in double_params} == double_params, name
        for extra in set(real_params) - set(double_params):
            assert real_params[extra][1] is not inspect.Parameter.empty, (name, extra)


def test_every_method_has_a_contract_test() -> None:
    called = set()
    for path in Path(__file__).parent.glob("test_contract*.py"):
        called |= set(re.findall(r"\bstore\.(\w+)\b", path.read_text(encoding="utf-8")))
    assert public(Store) - SQL_ONLY - called == set()
