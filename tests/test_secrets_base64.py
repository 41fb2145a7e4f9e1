"""Secrets inside longer base64 texts, wrapped at any width (SPEC §11): nothing stored,
logged or shown decodes back to a secret, whatever its alignment, line width, line ends,
padding or alphabet."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import shutil
import string
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import remembered

from brain._secrets import MIN_SECRET_LENGTH

REPO = Path(__file__).resolve().parent.parent
_NOT_RUN = re.compile(r"[^A-Za-z0-9+/_-]+")


def _recoverable(text: str, secret: bytes) -> bool:
    """Whether some base64 run of ``text`` (line breaks taken out, either alphabet, ``=``
    ending a run), read from any of its first four characters, decodes to bytes holding
    ``secret``."""
    joined = text.replace("\r", "").replace("\n", "").translate(str.maketrans("-_", "+/"))
    for run in _NOT_RUN.split(joined):
        for shift in range(4):
            chars = run[shift:]
            if len(chars) < 2:
                continue
            if secret in binascii.a2b_base64(chars + "A" * (-len(chars) % 4)):
                return True
    return False




def _wrapped(data: bytes, width: int, *, padded: bool, urlsafe: bool, newline: str) -> str:
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()
    if not padded:
        encoded = encoded.rstrip("=")
    return newline.join(encoded[i:i + width] for i in range(0, len(encoded), width)) + newline


_SECRETS = st.one_of(
    st.text(string.printable.strip(), min_size=MIN_SECRET_LENGTH, max_size=128),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=("Cs",)),
            min_size=MIN_SECRET_LENGTH, max_size=128))


@settings(max_examples=300, deadline=None)
@given(value=_SECRETS, before=st.binary(max_size=200), after=st.binary(max_size=200),
       width=st.integers(4, 200), padded=st.booleans(), urlsafe=st.booleans(),
       newline=st.sampled_from(["\n", "\r\n"]), label=st.sampled_from(["", "auth: ", "x=\n"]))
def test_a_secret_inside_a_wrapped_base64_text_cannot_be_decoded_from_what_is_scrubbed(
        value: str, before: bytes, after: bytes, width: int, padded: bool, urlsafe: bool,
        newline: str, label: str) -> None:
    """``printf 'user:%s' "$TOK" | base64`` and its like: the secret anywhere in a longer
    encoded text, the text wrapped at any width, with or without padding, in either
    alphabet, with LF or CRLF: no run of the scrubbed text decodes back to it."""
    from brain._secrets import scrub

    secret = value.encode()
    text = label + _wrapped(before + secret + after, width, padded=padded, urlsafe=urlsafe,
                            newline=newline) + "(done)" + newline
    assert _recoverable(text, secret)
    with remembered(value):
        scrubbed = scrub(text) or ""
    assert not _recoverable(scrubbed, secret), scrubbed
    assert scrubbed.startswith(label) and scrubbed.endswith("(done)" + newline)


@settings(max_examples=150, deadline=None)
@given(value=_SECRETS, data=st.binary(min_size=1, max_size=300), width=st.integers(4, 200),
       newline=st.sampled_from(["\n", "\r\n"]))
def test_a_wrapped_base64_text_without_the_secret_is_left_alone(
        value: str, data: bytes, width: int, newline: str) -> None:
    """Only runs that hold a secret go: other encoded text keeps every character."""
    from brain._secrets import scrub

    text = _wrapped(data, width, padded=True, urlsafe=False, newline=newline)
    secret = value.encode()
    with remembered(value):
        if secret[1:-1] in data or _recoverable(text, secret[1:-1]):
            return  # (a secret's core there by chance: nothing to say)
        assert scrub(text) == text


@settings(max_examples=150, deadline=None)
@given(value=_SECRETS, before=st.binary(max_size=100), after=st.binary(max_size=100),
       width=st.integers(4, 100), split=st.floats(0, 1), newline=st.sampled_from(["\n", "\r\n"]))
def test_live_lines_of_a_wrapped_encoding_taken_in_two_batches_hold_no_secret(
        value: str, before: bytes, after: bytes, width: int, split: float, newline: str) -> None:
    """A step's live log made in two takes, the encoding's lines split between them: the
    lines of both, read together, decode to no secret (the last lines of the first take
    wait for what follows them)."""
    from brain.executors.steplog import StepLog

    secret = value.encode()
    text = _wrapped(before + secret + after, width, padded=True, urlsafe=False,
                    newline=newline).encode()
    lines = text.splitlines(keepends=True)
    cut = round(split * len(lines))
    with remembered(value):
        log = StepLog()
        log.feed("stdout", b"".join(lines[:cut]))
        first = log.take()
        log.feed("stdout", b"".join(lines[cut:]) + b"(that was all)\n")
        second = log.take()
        last = log.take(final=True)
    shown = "\n".join(line.text for batch in (first, second, last) for line in batch.lines)
    assert not _recoverable(shown, secret), shown
    assert shown.endswith("(that was all)")


@settings(max_examples=100, deadline=None)
@given(value=st.text(string.ascii_letters + string.digits, min_size=22, max_size=128),
       before=st.binary(max_size=60), width=st.integers(4, 100))
def test_a_part_of_a_wrapped_encoding_let_out_alone_shows_at_most_ten_bytes_of_a_secret(
        value: str, before: bytes, width: int) -> None:
    """The rule for a part of a run scrubbed apart from the rest (a writer that pauses in
    the middle of an encoded secret for longer than a take): any run holding 11 bytes of a
    secret goes, so each part shows no piece of it longer than 10 bytes."""
    from brain._secrets import scrub_part

    secret = value.encode()
    text = _wrapped(before + secret + b"!", width, padded=True, urlsafe=False, newline="\n")
    lines = text.split("\n")
    with remembered(value):
        for cut in range(1, len(lines)):
            for part in ("\n".join(lines[:cut]), "\n".join(lines[cut:])):
                shown = scrub_part(part) or ""
                for start in range(len(secret) - 10):
                    assert not _recoverable(shown, secret[start:start + 11]), (cut, shown)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(string.ascii_letters + string.digits, min_size=MIN_SECRET_LENGTH,
                     max_size=64), before=st.binary(max_size=300), after=st.binary(max_size=300))
def test_a_stderr_tail_cut_inside_a_wrapped_encoding_keeps_no_secret(
        value: str, before: bytes, after: bytes) -> None:
    """A tail cut at any line of a wrapped encoding (the cut may fall inside the secret's
    lines) keeps nothing that decodes to the secret: a margin holds a wrapped form whole."""
    from brain.executors.base import tail_text

    secret = value.encode()
    data = _wrapped(before + secret + after, 4, padded=True, urlsafe=False,
                    newline="\r\n").encode()
    with remembered(value):
        for limit in range(16, len(data), 7):
            tail = tail_text(data, limit) or ""
            assert not _recoverable(tail, secret), (limit, tail)


# --- end to end: a real shell step ----------------------------------------------------------

_WORKFLOW = """
from brain import secret, shell, workflow


@workflow(name="encodes")
def encodes():
    tok = secret("B64_TOKEN")
    shell("plain", command="printf 'user:%s' \\"$TOK\\" | base64", env={"TOK": tok})
    shell("narrow", command="printf 'ab:%s!' \\"$TOK\\" | base64 -w 20", env={"TOK": tok})
    shell("logged", command="printf 'abc:%s' \\"$TOK\\" | base64 >&2; echo done",
          env={"TOK": tok})
"""
_OPENSSL = """\
    shell("openssl", command="printf 'user:%s' \\"$TOK\\" | openssl base64", env={"TOK": tok})
"""


def test_a_shell_step_printing_a_secret_in_base64_stores_and_shows_none_of_it(
        tmp_path: Path) -> None:
    """``base64`` (76 a line), ``base64 -w 20`` and ``openssl base64`` (64 a line) of a
    text holding a 64-character secret: the stored outputs, the stored log lines and the
    run's JSON hold nothing that decodes back to it."""
    value = "".join(string.ascii_letters[i % 52] + str(i % 10) for i in range(32))
    assert len(value) == 64
    (tmp_path / "wf.py").write_text(
        _WORKFLOW + (_OPENSSL if shutil.which("openssl") else ""))
    env = {**os.environ, "B64_TOKEN": value,
           "BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"}
    run = subprocess.run([str(REPO / ".venv/bin/brain"), "run", str(tmp_path / "wf.py"), "--json"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert '"succeeded"' in run.stdout
    import sqlite3

    with contextlib.closing(sqlite3.connect(tmp_path / "brain.db")) as con:
        outputs = [r[0] or "" for r in con.execute("SELECT output FROM brain_steps")]
        lines = [r[0] or "" for r in con.execute("SELECT text FROM brain_step_logs ORDER BY seq")]
    shown = {"run json": run.stdout, "cli lines": run.stderr,
             "outputs": "\n".join(outputs), "log lines": "\n".join(lines)}
    assert len(outputs) == (4 if shutil.which("openssl") else 3)
    assert "done" in shown["log lines"]
    for where, text in shown.items():
        assert "***" in text or where == "cli lines", where
        assert not _recoverable(text, value.encode()), (where, text)
        assert value not in text, where
