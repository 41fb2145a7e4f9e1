"""Secrets never reach what is stored (SPEC §11): any step's output, error or stderr, of
any step — not only the step that reads the secret — and steps cannot read them from the
orchestrator's environment."""

from __future__ import annotations

import base64
import os
import shutil
import string
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import remembered

from brain import secret, shell, step, workflow
from brain._secrets import MIN_SECRET_LENGTH
from brain.store import Store
from brain.store.urls import MEMORY_URL

REPO = Path(__file__).resolve().parent.parent


def _stored_text(result: object) -> str:
    """Every stored value of ``result`` (its field names left out: a secret such as
    ``created_`` may well be part of one), one per line."""
    out: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif value is not None:
            out.append(str(value))

    walk(result.model_dump(mode="json"))  # type: ignore[attr-defined]
    return "\n".join(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                     min_size=MIN_SECRET_LENGTH, max_size=40),
       before=st.text(max_size=20), after=st.text(max_size=20))
def test_a_secret_is_scrubbed_from_every_steps_output_error_and_stderr(
        monkeypatch: pytest.MonkeyPatch, value: str, before: str, after: str) -> None:
    monkeypatch.setenv("SCRUB_TEST_TOKEN", value)

    @step
    def leak() -> str:  # another step that happens to see the value
        return before + os.environ["SCRUB_TEST_TOKEN"] + after

    @step
    def fail_with_it() -> str:
        raise RuntimeError("bad token " + os.environ["SCRUB_TEST_TOKEN"])

    @workflow(name="scrubbed")
    def scrubbed():
        leak()  # runs before the step that reads the secret
        shell("use", argv=["true"], env={"T": secret("SCRUB_TEST_TOKEN")})
        fail_with_it()

    r = scrubbed.run(store=Store(MEMORY_URL))
    assert r.steps["use"].status == "succeeded"
    assert r.steps["fail_with_it"].status == "failed"
    assert value not in _stored_text(r)
    assert value not in (r.steps["leak"].output or "")
    assert "***" in (r.steps["leak"].output or "")


def test_a_secret_in_a_shell_steps_stderr_and_error_is_scrubbed(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SCRUB_SHELL_TOKEN", "shell-secret-0123456789")
    leaked = tmp_path / "leaked"
    leaked.write_text("shell-secret-0123456789")

    @workflow(name="scrub_shell")
    def scrub_shell():
        shell("use", argv=["true"], env={"T": secret("SCRUB_SHELL_TOKEN")})
        shell("echoes", command=f"cat {leaked}; cat {leaked} >&2; exit 3")

    r = scrub_shell.run(store=Store(MEMORY_URL))
    assert r.status == "failed"
    assert "shell-secret-0123456789" not in _stored_text(r)
    assert "***" in (r.steps["echoes"].stderr or "")


@pytest.mark.parametrize("value", ["x", "abc", "1234567"])
def test_a_secret_too_short_to_scrub_fails_the_step_that_reads_it(monkeypatch: pytest.MonkeyPatch,
                                                                   value: str) -> None:
    monkeypatch.setenv("SHORT_TOKEN", value)

    @workflow(name="short_secret")
    def short_secret():
        shell("show", command="echo a b c x y z 123 abc")
        shell("use", argv=["true"], env={"T": secret("SHORT_TOKEN")})

    r = short_secret.run(store=Store(MEMORY_URL))
    assert r.status == "failed"
    assert r.steps["show"].output == "a b c x y z 123 abc"  # not mangled by a one-letter secret
    error = r.steps["use"].error or ""
    assert "SHORT_TOKEN" in error and "8 characters" in error
    assert value not in error.replace("SHORT_TOKEN", "").replace("8 characters", "")


def test_the_orchestrator_environment_is_unreadable_from_a_step(tmp_path: Path) -> None:
    """A step runs as the orchestrator's user; ``/proc/$PPID/environ`` must not give it the
    variables that were kept out of its own environment. Run as an unprivileged user,
    since root reads any process's environment."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3.11").exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3.11 to run as another user")
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    folder = Path(tempfile.mkdtemp(prefix="brain-dump-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        script = folder / "probe.py"
        script.write_text(textwrap.dedent('''
            import sys
            import brain._secrets
            if sys.argv[1] == "control":
                brain._secrets.make_undumpable = lambda: None
            from brain import shell, workflow
            from brain.store import Store

            @workflow(name="probe")
            def probe():
                shell("peek", command="tr '\\\\0' '\\\\n' < /proc/$PPID/environ || echo unreadable")

            r = probe.run(store=Store("sqlite:///:memory:"))
            print(r.steps["peek"].output)
        '''))
        script.chmod(0o644)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{site}",
               "BRAIN_PROBE_VALUE": "orchestrator-only-token-42", "HOME": str(folder)}

        def probe(mode: str) -> str:
            done = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "/usr/bin/python3.11", str(script), mode],
                env=env, cwd=folder, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr[-2000:]
            return done.stdout

        control = probe("control")
        if "orchestrator-only-token-42" not in control:
            pytest.skip(f"this machine hides /proc environ anyway: {control[-300:]}")
        assert "orchestrator-only-token-42" not in probe("real")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_overlapping_and_quoted_forms_of_secrets_are_scrubbed_whole() -> None:
    import json

    from brain._secrets import remember, scrub

    remember("first-secret-value-OVERLAP1")
    remember("OVERLAP1-second-secret-TAIL")
    assert scrub("a first-secret-value-OVERLAP1-second-secret-TAIL b") == "a *** b"
    remember('quote"secret\\value\nXYZ123')
    assert scrub(json.dumps({"k": 'quote"secret\\value\nXYZ123'})) == '{"k": "***"}'
    assert scrub(repr(KeyError('quote"secret\\value\nXYZ123'))) == "KeyError('***')"


@pytest.mark.parametrize("where", ["LLM_API_KEY", "literal"])
def test_a_short_llm_key_fails_the_step(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    from brain import llm

    if where == "LLM_API_KEY":
        monkeypatch.setenv("LLM_API_KEY", "sk-1234")
        key = None
    else:
        key = "sk-abc1"

    @workflow(name="short_key")
    def short_key():
        llm("ask", prompt="hi", model="m", provider_url="http://127.0.0.1:9/v1", api_key=key)

    r = short_key.run(store=Store(MEMORY_URL))
    assert r.status == "failed"
    assert "shorter than 8 characters" in (r.steps["ask"].error or "")
    assert "sk-1234" not in _stored_text(r) and "sk-abc1" not in _stored_text(r)


def test_a_secret_cut_by_the_stderr_tail_or_the_error_line_leaves_no_fragment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    value = "Sup3rS3cret-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
    monkeypatch.setenv("CUT_TOKEN", value)
    # The last 8 KiB of stderr start in the middle of the secret; the error line (cut at
    # 500 characters) ends in the middle of it.
    script = tmp_path / "noisy.sh"
    script.write_text(f'printf "%s" "{value}" >&2; head -c 8180 /dev/zero | tr "\\\\0" x >&2\n'
                      f'printf "\\n%s%s\\n" "$(head -c 480 /dev/zero | tr "\\\\0" y)" "{value}" >&2\n'
                      "exit 1\n")

    @workflow(name="cut_secret")
    def cut_secret():
        shell("use", argv=["true"], env={"T": secret("CUT_TOKEN")})
        shell("noisy", argv=["sh", str(script)])

    r = cut_secret.run(store=Store(MEMORY_URL))
    assert r.steps["noisy"].status == "failed"
    stored = _stored_text(r)
    for size in range(8, len(value)):
        assert value[:size] not in stored and value[-size:] not in stored, size


def test_another_workflows_literal_key_and_the_trigger_body_are_scrubbed(tmp_path: Path) -> None:
    from brain import llm

    literal = "sk-literal-key-0123456789"
    leaked = tmp_path / "leaked"
    leaked.write_text(literal)

    @workflow(name="holds_a_literal_key")
    def holds_a_literal_key():
        llm("ask", prompt="hi", model="m", provider_url="http://127.0.0.1:9/v1", api_key=literal)

    @workflow(name="prints_it")
    def prints_it():
        shell("show", command=f"cat {leaked}")

    r = prints_it.run(trigger={"body": f"key={literal}", "headers": {"X-Api-Key": literal}},
                      store=Store(MEMORY_URL))
    assert r.succeeded, r.error
    assert literal not in _stored_text(r)
    assert r.steps["show"].output == "***"


def test_secrets_in_more_quoted_forms_and_with_a_trailing_newline_are_scrubbed() -> None:
    import json
    from urllib.parse import quote

    from brain._secrets import remember, scrub

    value = 'quo"te\\back-secret-ABC'
    remember(value)
    assert scrub(json.dumps({"out": json.dumps({"k": value})})) == '{"out": "{\\"k\\": \\"***\\"}"}'
    assert value not in (scrub(repr([repr(value)])) or "")
    assert scrub(quote(value, safe="")) == "***"
    remember("trailing-newline-secret-123\n")
    assert scrub("got trailing-newline-secret-123") == "got ***"


def test_a_secret_longer_than_the_tail_margin_leaves_no_fragment(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    value = "LONG" + "q" * 4992 + "END"
    monkeypatch.setenv("LONG_TOKEN", value)
    script = tmp_path / "long.sh"
    script.write_text('printf "%s" "$T" >&2; head -c 8000 /dev/zero | tr "\\\\0" x >&2; exit 1\n')

    @workflow(name="long_secret")
    def long_secret():
        shell("noisy", argv=["sh", str(script)], env={"T": secret("LONG_TOKEN")})

    r = long_secret.run(store=Store(MEMORY_URL))
    stored = _stored_text(r)
    assert "qqqqqqqqEND" not in stored and "LONGqqqq" not in stored


def test_a_provider_url_password_is_a_secret_in_every_form(tmp_path: Path) -> None:
    import base64

    from brain import llm
    from brain._secrets import scrub

    @workflow(name="url_password")
    def url_password():
        llm("ask", prompt="hi", model="m", provider_url="http://admin:UrlPassw0rd-secret@127.0.0.1:9/v1")

    url_password.run(store=Store(MEMORY_URL))
    basic = base64.b64encode(b"admin:UrlPassw0rd-secret").decode()
    assert scrub(f"auth was: Basic {basic}") == "auth was: Basic ***"
    assert scrub("UrlPassw0rd-secret") == "***"

    @workflow(name="short_url_password")
    def short_url_password():
        llm("ask", prompt="hi", model="m", provider_url="http://u:pw1@127.0.0.1:9/v1")

    r = short_url_password.run(store=Store(MEMORY_URL))
    assert "shorter than 8" in (r.steps["ask"].error or "")


def test_a_secret_repeated_on_every_line_leaves_no_fragment_in_the_tail(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Scrubbing many copies shrinks the text a lot: the cut must still never keep a piece."""
    value = "Bearer-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd"
    monkeypatch.setenv("REPEATED_TOKEN", value)
    script = tmp_path / "chatty.sh"
    script.write_text('i=0; while [ $i -lt 2000 ]; do echo "Authorization: $T" >&2; '
                      'i=$((i+1)); done; exit 1\n')

    @workflow(name="chatty")
    def chatty():
        shell("noisy", argv=["sh", str(script)], env={"T": secret("REPEATED_TOKEN")})

    r = chatty.run(store=Store(MEMORY_URL))
    stored = _stored_text(r)
    for size in range(8, len(value)):
        assert value[-size:] not in stored and value[:size] not in stored, size
    assert "Authorization: ***" in (r.steps["noisy"].stderr or "")


@settings(max_examples=300, deadline=None)
@given(value=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-", min_size=8,
                     max_size=80),
       before=st.text("0123456789 :=./", max_size=40), after=st.text("0123456789 :=./",
                                                                     max_size=40),
       lines=st.integers(1, 400), limit=st.integers(16, 2000))
def test_a_tail_keeps_no_piece_of_a_secret_wherever_the_cut_falls(
        value: str, before: str, after: str, lines: int, limit: int) -> None:
    """However often a secret repeats and wherever the tail's cut lands (inside it, just
    before it, in the text around it), no piece of it of 8 characters or more is left."""
    from brain.executors.base import tail_text

    with remembered(value):  # each example with only its own secret added
        data = ((before + value + after + "\n") * lines).encode()
        tail = tail_text(data, limit) or ""
    assert len(tail.encode()) <= limit
    for size in range(MIN_SECRET_LENGTH, len(value) + 1):
        for piece in {value[:size], value[-size:]}:
            assert piece not in tail, (piece, tail)


@settings(max_examples=200, deadline=None)
@given(value=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-", min_size=8,
                     max_size=60), pad=st.integers(1900, 2100))
def test_an_internal_error_cut_to_its_limit_keeps_no_piece_of_a_secret(value: str,
                                                                       pad: int) -> None:
    from brain.runner.texts import internal_error as _internal_error

    with remembered(value):
        text = _internal_error(LookupError("u" * pad + " with token " + value))
    assert len(text) <= 2000
    for size in range(MIN_SECRET_LENGTH, len(value) + 1):
        assert value[:size] not in text and value[-size:] not in text


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
                      min_size=2, max_size=5),
       gaps=st.lists(st.sampled_from([" ", "  ", "\t", "\n", " \n "]), min_size=4, max_size=4))
def test_an_llm_error_preview_keeps_no_secret_with_whitespace_inside(words: list[str],
                                                                     gaps: list[str]) -> None:
    from brain.executors.llm import _preview

    value = "".join(w + g for w, g in zip(words, gaps, strict=False)) + "END"
    if len(value) < MIN_SECRET_LENGTH:
        value += "x" * MIN_SECRET_LENGTH
    with remembered(value):
        shown = _preview('{"error": "invalid api key Bearer ' + value + '"}')
    assert value not in shown and " ".join(value.split()) not in shown




@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=", min_size=8,
                              max_size=40), min_size=2, max_size=6),
       label=st.text("abc :-", max_size=10))
def test_a_secret_of_several_lines_printed_line_by_line_is_scrubbed(lines: list[str],
                                                                     label: str) -> None:
    """A key printed one line at a time, each with its own prefix, shows none of its lines."""
    from brain._secrets import scrub

    value = "-----BEGIN KEY-----\n" + "\n".join(lines) + "\n-----END KEY-----"
    with remembered(value):
        printed = scrub("".join(f"{label}{line}\n" for line in value.splitlines())) or ""
    for line in lines:
        assert line not in printed


@settings(max_examples=200, deadline=None)
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                     min_size=MIN_SECRET_LENGTH, max_size=40))
def test_a_secret_url_quoted_in_any_usual_way_is_scrubbed(value: str) -> None:
    """Python's quote (its default keeps ``/``, as a URL path does), quote with nothing
    kept, and quote_plus: each form of the secret leaves nothing of it."""
    from urllib.parse import quote, quote_plus

    from brain._secrets import remember, scrub

    assume(value.strip() == value and len(value.strip()) >= MIN_SECRET_LENGTH)
    remember(value)
    for form in {quote(value), quote(value, safe=""), quote_plus(value),
                 quote_plus(value, safe="/")}:
        if len(form) >= MIN_SECRET_LENGTH:
            assert form not in (scrub(f"url: {form} end") or ""), (value, form)


def test_a_secret_that_is_a_form_of_another_keeps_its_own_forms() -> None:
    from urllib.parse import quote

    from brain._secrets import remember, scrub

    remember("p@ss/word:42 ")  # its stripped form is the next secret
    remember("p@ss/word:42")
    assert scrub(quote("p@ss/word:42", safe="")) == "***"


# --- encoded secrets (SPEC §11: base64 in every alignment, hex) ------------------------------

_ENCODERS = {
    "base64": lambda data: base64.b64encode(data).decode(),
    "urlsafe": lambda data: base64.urlsafe_b64encode(data).decode(),
    "hex": lambda data: data.hex(),
    "HEX": lambda data: data.hex().upper(),
}
_ALPHABETS = {
    "base64": string.ascii_letters + string.digits + "+/",
    "urlsafe": string.ascii_letters + string.digits + "-_",
    "hex": "0123456789abcdef",
    "HEX": "0123456789ABCDEF",
}
_SECRET_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                       min_size=MIN_SECRET_LENGTH, max_size=64)


def _core(encoding: str, encoded: str, start: int, size: int) -> str:
    """The characters of ``encoded`` made only of the bytes ``[start, start + size)``: for
    hex, two per byte; for base64 (6 bits a character), those lying wholly inside them."""
    if encoding in ("hex", "HEX"):
        return encoded[2 * start:2 * (start + size)]
    return encoded[-(-8 * start // 6):8 * (start + size) // 6]


def _decodes_to(text: str, encoding: str, secret: bytes) -> bool:
    """Whether some stretch of ``text`` in the encoding's alphabet, read from any character,
    decodes to bytes holding ``secret``."""
    alphabet = _ALPHABETS[encoding]
    runs = "".join(c if c in alphabet else " " for c in text).split()
    for run in runs:
        if encoding in ("hex", "HEX"):
            pieces = [bytes.fromhex(run[shift:][:len(run[shift:]) // 2 * 2]) for shift in (0, 1)]
        else:
            decode = base64.b64decode if encoding == "base64" else base64.urlsafe_b64decode
            pieces = [decode(run[shift:][:len(run[shift:]) // 4 * 4]) for shift in range(4)]
        if any(secret in piece for piece in pieces):
            return True
    return False


@settings(max_examples=400, deadline=None)
@given(value=_SECRET_TEXT, before=st.binary(max_size=40), after=st.binary(max_size=40),
       encoding=st.sampled_from(sorted(_ENCODERS)))
def test_a_secret_encoded_inside_a_longer_text_leaves_nothing_that_decodes_to_it(
        value: str, before: bytes, after: bytes, encoding: str) -> None:
    """Base64 (both alphabets, the secret at any byte offset) and hex of a text holding the
    secret: its aligned core is gone, and no stretch of what is left decodes to it."""
    from brain._secrets import scrub

    secret = value.encode()
    encoded = _ENCODERS[encoding](before + secret + after)
    core = _core(encoding, encoded, len(before), len(secret))
    assert len(core) >= MIN_SECRET_LENGTH  # even an 8-byte secret has a core worth scrubbing
    with remembered(value):
        scrubbed = scrub(encoded) or ""
        alone = scrub(_ENCODERS[encoding](secret))
    assert core not in scrubbed
    assert not _decodes_to(scrubbed, encoding, secret), scrubbed
    assert "***" in scrubbed
    assert alone == "***"  # the value encoded by itself, padding included


@settings(max_examples=300, deadline=None)
@given(value=_SECRET_TEXT, data=st.binary(max_size=200), encoding=st.sampled_from(sorted(_ENCODERS)))
def test_encoded_text_without_the_secret_is_left_alone(value: str, data: bytes,
                                                        encoding: str) -> None:
    """Remembering a secret's encodings does not make other encoded text lose characters."""
    from brain._secrets import scrub

    encoded = _ENCODERS[encoding](data)
    secret = value.encode()
    assume(secret[1:-1] not in data and value not in encoded)
    with remembered(value):
        assert scrub(encoded) == encoded


def test_a_secret_in_a_basic_auth_header_and_a_hex_dump_is_scrubbed() -> None:
    from brain._secrets import scrub

    value = "hunter2-is-my-password"
    with remembered(value):
        for user in ("a", "ab", "abc"):  # the three alignments after "user:"
            header = base64.b64encode(f"{user}:{value}".encode()).decode()
            shown = scrub(f"Authorization: Basic {header}") or ""
            assert "***" in shown
            assert not _decodes_to(shown, "base64", value.encode())
        assert scrub(f"dump {value.encode().hex()} end") == "dump *** end"


@settings(max_examples=150, deadline=None)
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",),
                                            exclude_characters="\x00"),
                     min_size=MIN_SECRET_LENGTH, max_size=120))
def test_a_secret_wrapped_or_escaped_as_tools_print_it_is_scrubbed(value: str) -> None:
    """The forms the attack round found unscrubbed: base64 and hex wrapped into lines as
    ``base64``, PEM and ``xxd -p`` wrap them; URL escapes in lower case; JSON with ``\\/``
    (PHP) and ``\\u003c`` (Go). Each wrapped line long enough to scrub is gone."""
    import json
    import re
    from urllib.parse import quote

    from brain._secrets import remember, scrub

    remember(value)
    data = value.encode("utf-8")
    encoded = [base64.b64encode(data).decode(), data.hex()]
    for text, width in [(e, w) for e in encoded for w in (76, 64, 60)]:
        lines = [text[i:i + width] for i in range(0, len(text), width)]
        scrubbed = scrub("\n".join(lines)) or ""
        for line in lines:
            if len(line) >= MIN_SECRET_LENGTH:
                assert line not in scrubbed
    quoted = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(value, safe=""))
    php = json.dumps(value).replace("/", "\\/")
    go = json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    for form in (quoted, php[1:-1], go[1:-1]):
        assert form not in (scrub(f"[{form}]") or "")
