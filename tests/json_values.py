"""What a JSON answer holds, for the tests of the value budget (``brain.executors.json_budget``):
the reference count of its structure, and the texts and tiny values answers are made of."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Text of any content (no NUL: an output holding one fails on its own), weighted towards
#: what JSON writes as structure or escapes.
ANY_TEXT = st.text(alphabet=st.one_of(st.sampled_from('{}[],:"\\\n\x01'),
                                      st.characters(blacklist_categories=("Cs",),
                                                    blacklist_characters="\x00")),
                   min_size=1, max_size=30)
#: Tiny values, containers and nestings, as a hostile answer packs them.
TINY = st.sampled_from([{}, [], 0, "a", [[[]]], {"k": []}, [0, 0]])


def structure_count(value: Any) -> int:
    """The structural characters JSON writes for ``value`` outside strings, as the budget
    counts them: a container's ``{`` or ``[``, a ``:`` per key, a ``,`` between two items
    (text counts nothing)."""
    if isinstance(value, dict):
        return 1 + 2 * len(value) - bool(value) + sum(map(structure_count, value.values()))
    if isinstance(value, list):
        return 1 + len(value) - bool(value) + sum(map(structure_count, value))
    return 0
