"""A shell step's output cut at ``max_output_bytes`` (SPEC §11, §2): the cut keeps no
beginning of a secret it splits, plain, base64- or hex-encoded, wherever the cut falls."""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brain import secret, shell, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "k9Qz-7Rw_Lm2Xv8pNc4Tg6Hy1Jb3Ds5Fa0We8Ui2Op4As6Df8Gh0Jk2Lz4Xc6Vb8"
LIMIT = 1000
FORMS = {
    "plain": ('printf %s "$TOK"', TOKEN),
    "base64": ('printf %s "$TOK" | base64 -w0', base64.b64encode(TOKEN.encode()).decode()),
    "hex": ('printf %s "$TOK" | od -An -v -tx1 | tr -d " \\n"', TOKEN.encode().hex()),
}


@settings(max_examples=12, deadline=None)
@given(form=st.sampled_from(sorted(FORMS)), before=st.integers(1, 120))
def test_an_output_cut_across_a_secret_keeps_no_beginning_of_it(form: str, before: int) -> None:
    """The secret (in ``form``) starts ``before`` bytes ahead of the limit, and the output
    goes on after it: the stored output keeps none of its first characters."""
    command, printed = FORMS[form]
    before = min(before, len(printed) - 1)  # the cut falls inside the printed secret

    @workflow
    def sh_cut_secret() -> None:
        shell("cut", max_output_bytes=LIMIT, env={"TOK": secret("TOK")},
              command=f"head -c {LIMIT - before} /dev/zero | tr '\\0' .; {command}; "
                      "head -c 3000 /dev/zero | tr '\\0' .")

    os.environ["TOK"] = TOKEN
    try:
        step = sh_cut_secret().steps["cut"]
    finally:
        del os.environ["TOK"]
    assert step.status == "failed"
    assert "max_output_bytes" in (step.error or "")
    output = step.output or ""
    assert output.startswith("." * (LIMIT - before)), output[-200:]
    shown = output[LIMIT - before:]
    assert set(shown) <= {"*", "."}, shown  # the secret as ***, cut or not, then dots
