"""Attack round 4 (SPEC §11, §20): secrets in encodings the scrubber does not recognise.

SPEC §11: "Scrubbing covers each value's common encodings too: base64 (every alignment),
hex, URL-quoted, JSON-escaped." The cases below are what common tools print. Those that
leaked (base64 indented or in a JSON array, hex with separators, ``xxd``'s dump) are fixed;
all guard against regressions.

Also the live log (:class:`brain.executors.steplog.StepLog`): a base64 text printed a few
short lines at a time with pauses (one take between lines), or half on stdout and half on
stderr, is stored and streamed whole, unscrubbed: known limits, ``xfail(strict=True)``.

Run: ``.venv/bin/pytest tests/attack/test_attack_round4_encodings.py``
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap

import pytest

# Each test runs the scrubber in a fresh interpreter: secrets are remembered process-wide.
SECRET = "S3cr3tTok-Abc_123xyz"
LONG = "k9Qz-7Rw_Lm2Xv8pNc4Tg6Hy1Jb3Ds5Fa0We8Ui2Op4As6Df8Gh0Jk2Lz4Xc6Vb8"


def _scrubbed(secret: str, text: str) -> str:
    code = textwrap.dedent("""
        import sys, json
        from brain._secrets import remember, scrub
        secret, text = json.loads(sys.stdin.read())
        remember(secret)
        sys.stdout.write(scrub(text))
    """)
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps([secret, text]),
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def _b64(secret: str) -> str:
    return base64.b64encode(secret.encode()).decode()


def _recoverable(secret: str, text: str) -> bool:
    """Whether ``text`` still holds ``secret``, its base64 or its hex once the spaces,
    quotes, commas, colons and line breaks a tool puts around them are taken out."""
    dense = "".join(c for c in text if c not in " \t\r\n\"',:[]")
    data = secret.encode()
    return secret in text or _b64(secret).rstrip("=") in dense or data.hex() in dense.lower()


HOLDS = {
    "base64 wrapped at 76": lambda s: base64.encodebytes(s.encode()).decode(),
    "base64 wrapped at 7, inside a longer text": lambda s: "\n".join(textwrap.wrap(
        base64.b64encode(b"ab" + s.encode()).decode(), 7)),
    "base64 url-safe unpadded, CRLF every 5": lambda s: "\r\n".join(textwrap.wrap(
        base64.urlsafe_b64encode(b"x" + s.encode()).decode().rstrip("="), 5)),
    "hex (xxd -p) wrapped at 10": lambda s: "\n".join(textwrap.wrap(s.encode().hex(), 10)),
}


@pytest.mark.parametrize("how", list(HOLDS))
def test_common_encodings_are_scrubbed(how: str) -> None:
    text = HOLDS[how](SECRET)
    assert "***" in _scrubbed(SECRET, text)


LEAKS = {
    # base64 -w 16 | sed 's/^/    /'  (a YAML block, an indented PEM)
    "base64 wrapped and indented": lambda s: "\n".join(
        "    " + line for line in textwrap.wrap(_b64(s), 16)),
    # a JSON array of base64 lines
    "base64 lines in a JSON array": lambda s: json.dumps(textwrap.wrap(_b64(s), 10)),
    # od -An -tx1
    "hex with spaces (od -An -tx1)": lambda s: "\n".join(
        " " + " ".join(f"{b:02x}" for b in s.encode()[i:i + 16])
        for i in range(0, len(s.encode()), 16)),
    # a fingerprint as openssl prints it
    "hex with colons": lambda s: ":".join(f"{b:02X}" for b in s.encode()),
}


@pytest.mark.parametrize("how", list(LEAKS))
def test_encodings_tools_print_are_scrubbed(how: str) -> None:
    text = LEAKS[how](SECRET)
    assert not _recoverable(SECRET, _scrubbed(SECRET, text)), _scrubbed(SECRET, text)


def test_xxd_default_dump_is_scrubbed() -> None:
    dump = subprocess.run(["xxd"], input=SECRET.encode(), capture_output=True,
                          timeout=10, check=True).stdout.decode()
    out = _scrubbed(SECRET, dump)
    assert SECRET[:16] not in out, out


_LOG = textwrap.dedent("""
    import json, sys
    from brain._secrets import remember
    from brain.executors.steplog import StepLog
    secret, parts = json.loads(sys.stdin.read())
    remember(secret)
    log = StepLog(secrets=[secret])
    lines = []
    for stream, text, takes in parts:
        log.feed(stream, text.encode())
        for _ in range(takes):
            lines += [line.text for line in log.take().lines]
    lines += [line.text for line in log.take(final=True).lines]
    print(json.dumps(lines))
""")


def _logged(secret: str, parts: list[tuple[str, str, int]]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _LOG], input=json.dumps([secret, parts]),
                         capture_output=True, text=True, timeout=60, check=True)
    lines: list[str] = json.loads(out.stdout)
    return lines


@pytest.mark.xfail(strict=True, reason="a known limit (brain/executors/steplog.py): a base64 "
                   "text printed 12 characters a line with a pause (a take) between lines is "
                   "stored and streamed line by line (scrub_part skips runs under 15 characters)")
def test_slowly_printed_wrapped_base64_is_scrubbed() -> None:
    # printf %s "$TOK" | base64 -w 12 | while read -r l; do echo "$l"; sleep 1.1; done
    parts = [("stdout", line + "\n", 2) for line in textwrap.wrap(_b64(LONG), 12)]
    lines = _logged(LONG, parts)
    assert not _recoverable(LONG, "\n".join(lines)), lines


@pytest.mark.xfail(strict=True, reason="a known limit (brain/executors/steplog.py): base64 "
                   "split between stdout and stderr is scrubbed per stream, so each half is stored")
def test_base64_split_across_streams_is_scrubbed() -> None:
    b64 = _b64(SECRET)
    half = len(b64) // 2
    lines = _logged(SECRET, [("stdout", b64[:half] + "\n", 0), ("stderr", b64[half:] + "\n", 0)])
    stored = "".join(lines)
    assert not (b64[:half] in stored and b64[half:] in stored), lines


def test_base64_printed_at_once_in_the_log_is_scrubbed() -> None:
    lines = _logged(LONG, [("stdout", base64.encodebytes(LONG.encode()).decode(), 1)])
    assert not _recoverable(LONG, "\n".join(lines)), lines
