"""Signed webhooks (SPEC §5) against a real ``brain serve`` subprocess on a free loopback port.

One server serves the whole module (start-up costs about a second); each test uses its
own workflow, or counts only the runs it created, so the tests do not depend on each other.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

from brain.server.webhooks import looks_stamped, parse_timestamp, sign, verify

# GitHub's documented example ("Validating webhook deliveries").
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
UNSET_VAR = "UNSET_HOOK_SECRET_FOR_TESTS"
MIB = 1024 * 1024

HOOKS = f'''
from brain import shell, trigger, webhook, workflow


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def hooked():
    shell("echo", argv=["echo", trigger.body])
    shell("environ", argv=["env"])


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", path="gh/push")])
def gh_push():
    shell("event", argv=["echo", trigger.headers["X-GitHub-Event"]])


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def dedupe():
    shell("ok", argv=["echo", "ok"])


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def sink():
    shell("ok", argv=["echo", "ok"])


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def hook_fails():
    shell("boom", command="echo broken >&2; exit 3")


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", wait_seconds=0.5)])
def slow_hook():
    shell("nap", command="sleep 2; echo rested")


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", require_timestamp=True)])
def stamped_only():
    shell("ok", argv=["echo", "ok"])


@workflow
def no_hook():
    shell("ok", argv=["echo", "ok"])


@workflow(triggers=[webhook(secret_env="{UNSET_VAR}")])
def unset_secret():
    shell("ok", argv=["echo", "ok"])
'''


def hub_sig(secret: str, body: bytes, timestamp: str | None = None) -> str:
    """The signature, computed here with ``hmac`` (independently of ``brain.server.webhooks``)."""
    message = body if timestamp is None else f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("hooks")
    folder = root / "workflows"
    folder.mkdir()
    write_source(folder, "hooks.py", HOOKS)
    env = clean_env(root / "brain.db", {"HOOK_SECRET": GITHUB_SECRET})
    env.pop(UNSET_VAR, None)
    srv = BrainServer(brain_argv(), folder, root, env)
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def post(server: BrainServer, path: str, body: bytes, headers: dict[str, str] | None = None,
         **params: str) -> httpx.Response:
    return server.client.post(path, content=body, headers=headers or {}, params=params)


def assert_json_error(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    assert data["status_code"] == status
    assert isinstance(data["detail"], str) and data["detail"]
    assert "Traceback" not in r.text
    return dict(data)


# --- the signature helpers themselves ------------------------------------------------------------


def test_known_vector_independently() -> None:
    """GitHub's published example, checked with plain hmac here and with brain's ``sign``/``verify``."""
    assert hub_sig(GITHUB_SECRET, GITHUB_BODY) == GITHUB_SIGNATURE
    assert sign(GITHUB_SECRET, GITHUB_BODY) == GITHUB_SIGNATURE
    assert verify(GITHUB_SECRET, GITHUB_BODY, {"x-hub-signature-256": GITHUB_SIGNATURE})
    assert verify(GITHUB_SECRET, GITHUB_BODY, {"x-brain-signature": GITHUB_SIGNATURE})
    assert not verify(GITHUB_SECRET, GITHUB_BODY + b" ", {"x-brain-signature": GITHUB_SIGNATURE})
    assert not verify("another secret", GITHUB_BODY, {"x-brain-signature": GITHUB_SIGNATURE})
    assert not verify(None, GITHUB_BODY, {"x-brain-signature": GITHUB_SIGNATURE})
    assert not verify(GITHUB_SECRET, GITHUB_BODY, {})


def test_timestamped_vector_independently() -> None:
    """With a timestamp the signed text is ``"{ts}.{body}"``; more than 300 s away is refused."""
    ts = "1700000000"
    expected = "sha256=" + hmac.new(GITHUB_SECRET.encode(), b"1700000000.Hello, World!",
                                    hashlib.sha256).hexdigest()
    assert sign(GITHUB_SECRET, GITHUB_BODY, ts) == expected == hub_sig(GITHUB_SECRET, GITHUB_BODY, ts)
    headers = {"x-brain-signature": expected, "x-brain-timestamp": ts}
    assert verify(GITHUB_SECRET, GITHUB_BODY, headers, now=1700000000 + 299)
    assert verify(GITHUB_SECRET, GITHUB_BODY, headers, now=1700000000 - 299)
    assert not verify(GITHUB_SECRET, GITHUB_BODY, headers, now=1700000000 + 301)
    assert not verify(GITHUB_SECRET, GITHUB_BODY, headers, now=1700000000 - 301)
    # The plain body signature does not do once a timestamp is sent.
    assert not verify(GITHUB_SECRET, GITHUB_BODY,
                      {"x-brain-signature": GITHUB_SIGNATURE, "x-brain-timestamp": ts},
                      now=1700000000)


SIGNATURE_HEADERS = ("x-brain-signature", "x-hub-signature-256")


@settings(max_examples=500, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=200),
       ts=st.integers(min_value=0, max_value=10**12).map(str) | st.from_regex(r"\A[0-9]{1,15}\Z"),
       header=st.sampled_from(SIGNATURE_HEADERS), require=st.booleans())
def test_stamped_signature_never_verifies_an_unstamped_delivery(
        secret: str, body: bytes, ts: str, header: str, require: bool) -> None:
    """A signature captured from a stamped delivery, replayed without the timestamp header and
    with the signed text ``"{ts}.{body}"`` as the body (or any other body), never verifies."""
    captured = sign(secret, body, ts)
    now = float(int(ts))
    assert verify(secret, body, {header: captured, "x-brain-timestamp": ts}, now=now,
                  require_timestamp=require)
    replay = ts.encode() + b"." + body
    for sent in (replay, body, replay + b"\n", b"0" + replay):
        for name in SIGNATURE_HEADERS:
            assert not verify(secret, sent, {name: captured}, now=now, require_timestamp=require)


@settings(max_examples=300, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=200),
       header=st.sampled_from(SIGNATURE_HEADERS))
def test_unstamped_delivery_verifies_unless_it_looks_stamped_or_stamps_are_required(
        secret: str, body: bytes, header: str) -> None:
    headers = {header: sign(secret, body)}
    assert verify(secret, body, headers) == (not looks_stamped(body))
    assert not verify(secret, body, headers, require_timestamp=True)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ts=st.text(max_size=12) | st.from_regex(r"\A[0-9]{1,12}\Z"),
       body=st.binary(max_size=30) | st.from_regex(rb"\A[0-9]{0,5}[.][\x00-\xff]{0,5}\Z"))
def test_stamped_looking_bodies_are_exactly_what_the_timestamp_parser_accepts(ts: str,
                                                                           body: bytes) -> None:
    """The refusal of stamped-looking bodies matches the timestamp header's accepted form
    exactly: a body looks stamped if and only if what precedes its first dot is a timestamp
    the header would accept."""
    accepted = parse_timestamp(ts) is not None
    assert accepted == (ts != "" and all(c in "0123456789" for c in ts))
    if accepted:
        assert looks_stamped(ts.encode() + b"." + body)
    head, dot, _ = body.partition(b".")
    assert looks_stamped(body) == (dot == b"." and parse_timestamp(head.decode("latin-1")) is not None)


def test_delivery_ids_are_never_cut() -> None:
    from brain.server.webhooks import MAX_DELIVERY_ID_CHARS, delivery_id

    prefix = "d" * MAX_DELIVERY_ID_CHARS
    first = delivery_id({"x-brain-delivery": prefix + "-one"})
    second = delivery_id({"x-github-delivery": prefix + "-two"})
    assert first != second
    assert first is not None and len(first) <= MAX_DELIVERY_ID_CHARS
    assert first == delivery_id({"x-brain-delivery": prefix + "-one"})
    assert delivery_id({"x-brain-delivery": prefix}) == prefix  # short enough: kept as sent


# --- a real server ------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["X-Hub-Signature-256", "X-Brain-Signature"])
def test_known_vector_accepted_and_run_succeeds(server: BrainServer, header: str) -> None:
    assert hub_sig(GITHUB_SECRET, GITHUB_BODY) == GITHUB_SIGNATURE
    r = post(server, "/hooks/hooked", GITHUB_BODY, {header: GITHUB_SIGNATURE})
    assert r.status_code == 202, r.text
    assert set(r.json()) == {"run_id"}
    run_id = r.json()["run_id"]
    # Committed before the answer: the run is there at once.
    assert server.run(run_id)["workflow"] == "hooked"
    run = server.wait_run(run_id)
    assert run["status"] == "succeeded", run
    assert run["trigger"]["event"] == "webhook"
    assert run["trigger"]["body"] == "Hello, World!"
    assert run["steps"][0]["name"] == "echo"
    assert run["steps"][0]["output"] == "Hello, World!"


def test_fresh_timestamped_signature_accepted(server: BrainServer) -> None:
    body = b'{"action": "opened"}'
    for skew in (0, -100, 100):
        ts = str(int(time.time()) + skew)
        r = post(server, "/hooks/hooked", body,
                 {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body, ts), "X-Brain-Timestamp": ts})
        assert r.status_code == 202, (skew, r.text)
        assert server.wait_run(r.json()["run_id"])["status"] == "succeeded"


def test_stale_or_future_timestamp_refused(server: BrainServer) -> None:
    body = b'{"action": "replayed"}'
    before = server.run_ids("hooked")
    unsigned = post(server, "/hooks/hooked", body).content
    for skew in (-310, 310, -3600, 86400):
        ts = str(int(time.time()) + skew)
        r = post(server, "/hooks/hooked", body,
                 {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body, ts), "X-Brain-Timestamp": ts})
        assert_json_error(r, 401)
        assert r.content == unsigned  # the same answer as any refusal
    # A timestamp header with a signature over the body alone is not valid either.
    ts = str(int(time.time()))
    r = post(server, "/hooks/hooked", body,
             {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body), "X-Brain-Timestamp": ts})
    assert_json_error(r, 401)
    r = post(server, "/hooks/hooked", body,
             {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body, "not-a-number"),
              "X-Brain-Timestamp": "not-a-number"})
    assert_json_error(r, 401)
    assert server.run_ids("hooked") == before


def test_every_refusal_is_the_same_401(server: BrainServer) -> None:
    """Bad/missing signature, unknown workflow, no webhook, unset secret: one answer, no run."""
    body = b'{"probe": true}'
    good = hub_sig(GITHUB_SECRET, body)
    cases = {
        "wrong secret": ("/hooks/hooked", {"X-Brain-Signature": hub_sig("wrong", body)}),
        "wrong github secret": ("/hooks/hooked", {"X-Hub-Signature-256": hub_sig("wrong", body)}),
        "signature of another body": ("/hooks/hooked", {"X-Brain-Signature": hub_sig(GITHUB_SECRET, b"x")}),
        "garbage signature": ("/hooks/hooked", {"X-Brain-Signature": "sha256=zz"}),
        "no signature": ("/hooks/hooked", {}),
        "unknown workflow": ("/hooks/does-not-exist", {"X-Brain-Signature": good}),
        "workflow without webhook": ("/hooks/no_hook", {"X-Brain-Signature": good}),
        "secret variable unset": ("/hooks/unset_secret", {"X-Brain-Signature": good}),
        "name instead of custom path": ("/hooks/gh_push", {"X-Brain-Signature": good}),
    }
    before = {wf: server.run_ids(wf) for wf in ("hooked", "no_hook", "unset_secret", "gh_push")}
    answers = {}
    for what, (path, headers) in cases.items():
        r = post(server, path, body, headers)
        assert_json_error(r, 401)
        answers[what] = r.content
    assert len(set(answers.values())) == 1, answers
    assert {wf: server.run_ids(wf) for wf in before} == before


def test_body_over_one_mib_is_413(server: BrainServer) -> None:
    before = server.run_ids("sink")
    body = b"a" * (MIB + 1)
    r = post(server, "/hooks/sink", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)})
    assert_json_error(r, 413)
    assert server.run_ids("sink") == before
    # Streamed (chunked, no Content-Length) is refused the same way.
    def chunks() -> Iterator[bytes]:
        for _ in range(17):
            yield b"c" * (64 * 1024)

    big = b"c" * (17 * 64 * 1024)
    r = server.client.post("/hooks/sink", content=chunks(),
                           headers={"X-Brain-Signature": hub_sig(GITHUB_SECRET, big)})
    assert "content-length" not in r.request.headers
    assert_json_error(r, 413)
    assert server.run_ids("sink") == before
    # Exactly 1 MiB is not over the limit.
    body = b"b" * MIB
    r = post(server, "/hooks/sink", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)})
    assert r.status_code == 202, r.text
    run = server.wait_run(r.json()["run_id"])
    assert run["status"] == "succeeded"
    assert len(run["trigger"]["body"]) == MIB


def test_non_utf8_body_is_400(server: BrainServer) -> None:
    before = server.run_ids("sink")
    body = b"\xff\xfe not \xc3\x28 utf-8"
    r = post(server, "/hooks/sink", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)})
    data = assert_json_error(r, 400)
    assert "utf" in str(data["detail"]).lower()
    assert server.run_ids("sink") == before


@pytest.mark.parametrize("header", ["X-Brain-Delivery", "X-GitHub-Delivery"])
def test_repeated_delivery_answers_first_run(server: BrainServer, header: str) -> None:
    body = b'{"delivery": "once"}'
    sig = {"X-Hub-Signature-256": hub_sig(GITHUB_SECRET, body)}
    delivery = str(uuid.uuid4())
    before = set(server.run_ids("dedupe"))
    first = post(server, "/hooks/dedupe", body, {**sig, header: delivery})
    assert first.status_code == 202, first.text
    run_id = first.json()["run_id"]
    after_first = set(server.run_ids("dedupe"))
    assert after_first == before | {run_id}
    assert server.wait_run(run_id)["status"] == "succeeded"
    for _ in range(2):
        again = post(server, "/hooks/dedupe", body, {**sig, header: delivery})
        assert again.status_code in (200, 202), again.text
        assert again.json()["run_id"] == run_id
    assert set(server.run_ids("dedupe")) == after_first
    # A repeated id with a bad signature is refused like any bad signature (nothing revealed).
    forged = post(server, "/hooks/dedupe", body,
                  {"X-Hub-Signature-256": hub_sig("wrong", body), header: delivery})
    assert_json_error(forged, 401)
    assert run_id not in forged.text
    # Another delivery id is another run.
    other = post(server, "/hooks/dedupe", body, {**sig, header: str(uuid.uuid4())})
    assert other.status_code == 202
    assert other.json()["run_id"] != run_id
    assert set(server.run_ids("dedupe")) == after_first | {other.json()["run_id"]}


def test_wait_true_answers_200_when_the_run_ends(server: BrainServer) -> None:
    body = b"waited for"
    r = post(server, "/hooks/hooked", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)},
             wait="true")
    assert r.status_code == 200, r.text
    data = r.json()
    assert set(data) == {"run_id", "status", "error", "output"}
    assert data["status"] == "succeeded"
    assert data["error"] is None
    assert server.run(data["run_id"])["steps"][0]["output"] == "waited for"

    r = post(server, "/hooks/hook_fails", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)},
             wait="true")
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["status"] == "failed"
    assert "step 'boom' failed" in data["error"]


def test_wait_true_gives_202_after_wait_seconds(server: BrainServer) -> None:
    body = b"slow"
    r = post(server, "/hooks/slow_hook", body, {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body)},
             wait="true")
    assert r.status_code == 202, r.text
    assert set(r.json()) == {"run_id"}
    run = server.wait_run(r.json()["run_id"])
    assert run["status"] == "succeeded"
    assert run["steps"][0]["output"] == "rested"


def test_custom_path(server: BrainServer) -> None:
    body = b'{"ref": "refs/heads/main"}'
    r = post(server, "/hooks/gh/push", body,
             {"X-Hub-Signature-256": hub_sig(GITHUB_SECRET, body), "X-GitHub-Event": "push"})
    assert r.status_code == 202, r.text
    run = server.wait_run(r.json()["run_id"])
    assert run["workflow"] == "gh_push"
    assert run["status"] == "succeeded", run
    assert run["steps"][0]["output"] == "push"
    assert run["trigger"]["body"] == body.decode()
    # The workflow tells where its hook is.
    info = server.client.get("/api/workflows/gh_push").json()
    assert [t["url_path"] for t in info["triggers"] if t["type"] == "webhook"] == ["/hooks/gh/push"]


def test_stored_headers_exclude_credentials_and_signatures(server: BrainServer) -> None:
    body = b'{"headers": "check"}'
    sig = hub_sig(GITHUB_SECRET, body)
    sha1 = "sha1=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha1).hexdigest()
    r = post(server, "/hooks/hooked", body, {
        "X-Brain-Signature": sig, "X-Hub-Signature-256": sig, "X-Hub-Signature": sha1,
        "Authorization": "Bearer bearer-value-must-not-be-stored",
        "Cookie": "session=cookie-value-must-not-be-stored",
        "X-GitHub-Event": "issues", "X-Custom-Thing": "kept", "Content-Type": "application/json"})
    assert r.status_code == 202, r.text
    run = server.wait_run(r.json()["run_id"])
    headers = {k.lower(): v for k, v in run["trigger"]["headers"].items()}
    assert headers["x-github-event"] == "issues"
    assert headers["x-custom-thing"] == "kept"
    assert headers["content-type"] == "application/json"
    for name in ("authorization", "cookie", "x-brain-signature", "x-hub-signature-256",
                 "x-hub-signature"):
        assert name not in headers, name
    text = json.dumps(run)
    for secret_value in ("bearer-value-must-not-be-stored", "cookie-value-must-not-be-stored",
                         sig.removeprefix("sha256="), sha1.removeprefix("sha1=")):
        assert secret_value not in text


def test_secret_not_in_run_record_nor_step_environment(server: BrainServer) -> None:
    r = post(server, "/hooks/hooked", GITHUB_BODY, {"X-Hub-Signature-256": GITHUB_SIGNATURE})
    assert r.status_code == 202
    run = server.wait_run(r.json()["run_id"])
    assert run["status"] == "succeeded"
    environ = run["steps"][1]["output"]
    assert "PATH=" in environ  # the step did print its environment
    assert "HOOK_SECRET" not in environ  # webhook secret variables are not passed to steps
    assert GITHUB_SECRET not in json.dumps(run)
    assert GITHUB_SECRET not in server.client.get("/api/workflows/hooked").text
    assert GITHUB_SECRET not in server.client.get("/api/workflows").text


def test_unset_secret_accepts_nothing_and_startup_says_so(server: BrainServer) -> None:
    # Signed with the secret other hooks use, and with an empty secret: both refused.
    for secret in (GITHUB_SECRET, ""):
        r = post(server, "/hooks/unset_secret", GITHUB_BODY,
                 {"X-Brain-Signature": hub_sig(secret, GITHUB_BODY)})
        assert_json_error(r, 401)
    assert server.run_ids("unset_secret") == []
    err = server.stderr()
    lines = [line for line in err.splitlines() if UNSET_VAR in line]
    assert lines, err
    assert any("unset_secret" in line for line in lines), lines


@pytest.mark.parametrize("header", ["X-Brain-Signature", "X-Hub-Signature-256"])
def test_stamped_delivery_replayed_without_timestamp_is_refused(server: BrainServer,
                                                               header: str) -> None:
    """Captured: a fresh stamped delivery. Replayed: its signed text as the body, the
    timestamp header dropped (so no freshness check would apply). Same 401, no run."""
    body = b'{"action": "deploy"}'
    ts = str(int(time.time()))
    captured = hub_sig(GITHUB_SECRET, body, ts)
    before = set(server.run_ids("hooked"))
    r = post(server, "/hooks/hooked", body, {header: captured, "X-Brain-Timestamp": ts})
    assert r.status_code == 202, r.text
    original = r.json()["run_id"]
    refusal = post(server, "/hooks/hooked", body).content
    replay = post(server, "/hooks/hooked", f"{ts}.".encode() + body, {header: captured})
    assert_json_error(replay, 401)
    assert replay.content == refusal
    assert set(server.run_ids("hooked")) == before | {original}


def test_require_timestamp_refuses_unstamped_deliveries(server: BrainServer) -> None:
    body = b'{"strict": true}'
    before = set(server.run_ids("stamped_only"))
    refusal = post(server, "/hooks/stamped_only", body).content
    for header in ("X-Brain-Signature", "X-Hub-Signature-256"):
        r = post(server, "/hooks/stamped_only", body, {header: hub_sig(GITHUB_SECRET, body)})
        assert_json_error(r, 401)
        assert r.content == refusal
    assert set(server.run_ids("stamped_only")) == before
    ts = str(int(time.time()))
    r = post(server, "/hooks/stamped_only", body,
             {"X-Brain-Signature": hub_sig(GITHUB_SECRET, body, ts), "X-Brain-Timestamp": ts})
    assert r.status_code == 202, r.text
    assert server.wait_run(r.json()["run_id"])["status"] == "succeeded"


@pytest.mark.parametrize("header", ["X-Brain-Delivery", "X-GitHub-Delivery"])
def test_long_delivery_ids_sharing_a_prefix_stay_apart(server: BrainServer, header: str) -> None:
    body = b'{"delivery": "long"}'
    sig = {"X-Hub-Signature-256": hub_sig(GITHUB_SECRET, body)}
    prefix = uuid.uuid4().hex * 8  # 256 characters shared by both ids
    before = set(server.run_ids("dedupe"))
    one = post(server, "/hooks/dedupe", body, {**sig, header: prefix + "-one"})
    two = post(server, "/hooks/dedupe", body, {**sig, header: prefix + "-two"})
    assert one.status_code == two.status_code == 202, (one.text, two.text)
    assert one.json()["run_id"] != two.json()["run_id"]
    again = post(server, "/hooks/dedupe", body, {**sig, header: prefix + "-one"})
    assert again.status_code in (200, 202), again.text
    assert again.json()["run_id"] == one.json()["run_id"]
    assert set(server.run_ids("dedupe")) == before | {one.json()["run_id"], two.json()["run_id"]}


def test_server_output_never_shows_the_secret_and_sigterm_stops_it(server: BrainServer) -> None:
    """Runs last: refused and accepted deliveries, then SIGTERM; the output never has the secret."""
    post(server, "/hooks/hooked", GITHUB_BODY, {"X-Brain-Signature": hub_sig("nope", GITHUB_BODY)})
    r = post(server, "/hooks/hooked", GITHUB_BODY, {"X-Brain-Signature": GITHUB_SIGNATURE},
             wait="true")
    assert r.status_code == 200
    code = server.stop()
    assert code in (0, -15), code
    output = server.output()
    assert "The Brain" in output  # the start-up line, so there is output to check
    assert GITHUB_SECRET not in output
    assert "Traceback" not in output

