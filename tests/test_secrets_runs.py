"""The encoded runs that hold a secret (SPEC §11) are found from each hit outwards: in a
text whose runs are wrapped by line breaks only, the same runs as listing every run of
the text, without the list (separators other than line breaks join runs too: see
test_secrets_tools.py)."""

from __future__ import annotations

import base64
import bisect
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from brain._secrets.forms import encoded_needles
from brain._secrets.runs import RUN, encoded_spans, trimmed

SECRET = "S3cr3tTok-Abc_123xyz"


def _listed(text: str, needles: set[str]) -> set[tuple[int, int]]:
    """The runs holding a needle, by listing every run and every line break (as the
    scrubber did)."""
    joined = re.sub(r"[\r\n]", "", text)
    breaks = [m.start() - i for i, m in enumerate(re.finditer(r"[\r\n]", text))]
    hits = [j + bisect.bisect_right(breaks, j) for form in needles
            for j in (m.start() for m in re.finditer(f"(?={re.escape(form)})", joined))]
    runs = [m.span() for m in RUN.finditer(text)]
    starts = [start for start, _ in runs]
    return {trimmed(text, *runs[bisect.bisect_right(starts, hit) - 1]) for hit in hits}


_PIECE = st.one_of(
    st.text("ABCxyz019+/-_=", max_size=12),
    st.sampled_from(["\n", "\r\n", "=", "==", "!", ".\n", "\n\n"]),
    st.binary(max_size=8).map(lambda b: base64.b64encode(b + SECRET.encode()).decode()),
    st.binary(max_size=3).map(lambda b: (b + SECRET.encode()).hex()),
)


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECE, max_size=12), width=st.integers(1, 80))
def test_runs_found_from_each_hit_are_those_a_list_of_every_run_gives(pieces: list[str],
                                                                       width: int) -> None:
    text = "".join(pieces)
    # Wrapped at some width, as tools print it.
    text = "\n".join(text[i:i + width] for i in range(0, len(text), width)) if width < 80 else text
    needles = encoded_needles(SECRET)
    assert set(encoded_spans(text, needles)) == _listed(text, needles)
