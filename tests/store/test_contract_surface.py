"""The store contract's surface: the contract suite tests every method of the store (a
method added later without a contract test fails here)."""

from __future__ import annotations

import re
from pathlib import Path

from brain.store import Store

#: The store's database and the schema upgrade of ``brain db upgrade``: tools, tested in
#: test_store.py rather than by the contract.
TOOLS = {"db", "dialect", "engine", "upgrade_schema"}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_every_method_has_a_contract_test() -> None:
    called = set()
    for path in Path(__file__).parent.glob("test_contract*.py"):
        called |= set(re.findall(r"\bstore\.(\w+)\b", path.read_text(encoding="utf-8")))
    assert public(Store) - TOOLS - called == set()
