"""The Docker image, ``compose.yaml`` and the derived MCP image (SPEC §15), built and run with
a real Docker engine.

Slow, and they need an engine: they run when ``BRAIN_DOCKER_TESTS=1``, which ``.ci/run``
sets once it has started one (``.ci/docker-engine``); otherwise they are skipped. With the
variable set, a missing engine is a failure, not a skip.

No image registry is reachable from the machines these run on, so images are built on a
local Debian base (``BRAIN_DOCKER_BASE``) with the machine's CA bundle as the ``ca`` build
secret, and PostgreSQL 16 comes from the stand-in image in ``tests/docker/postgres16``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import free_port, write_source

ROOT = Path(__file__).resolve().parents[2]
DOCKER = os.environ.get("BRAIN_DOCKER", "/usr/bin/docker")  # Debian's client has BuildKit
BASE = os.environ.get("BRAIN_DOCKER_BASE", "local/python:3.11-bookworm")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TAG = f"brain-test:{uuid.uuid4().hex[:8]}"

pytestmark = [
    pytest.mark.skipif(os.environ.get("BRAIN_DOCKER_TESTS") != "1",
                       reason="Docker tests run with BRAIN_DOCKER_TESTS=1 (.ci/run sets it when "
                              "it could start a Docker engine)"),
    pytest.mark.timeout(900),
]


def _run(argv: list[str], timeout: float = 600, *, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def _ok(argv: list[str], timeout: float = 600, *, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> str:
    proc = _run(argv, timeout, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(argv)}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _build(context: Path, tag: str, *args: str) -> None:
    secret = ["--secret", f"id=ca,src={CA_BUNDLE}"] if CA_BUNDLE.is_file() else []
    _ok([DOCKER, "build", "-q", *secret, *args, "-t", tag, str(context)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"})


@pytest.fixture(scope="module")
def brain_image() -> Iterator[str]:
    """The project's image, built from the repository's Dockerfile on the local base."""
    if _run([DOCKER, "info"], 60).returncode != 0:
        pytest.fail(f"BRAIN_DOCKER_TESTS=1 but no Docker engine answers {DOCKER} info")
    _build(ROOT, TAG, "--build-arg", f"BASE={BASE}")
    yield TAG
    _run([DOCKER, "image", "rm", "-f", TAG], 120)


def _compose() -> list[str]:
    found = shutil.which("docker-compose")
    return [found] if found else [DOCKER, "compose"]


def test_the_stock_image_runs_as_a_user_refuses_an_open_port_without_a_token_and_has_no_mcp_server(
        brain_image: str) -> None:
    # Any command runs as brain, through the entrypoint; one started as another user too.
    assert _ok([DOCKER, "run", "--rm", brain_image, "id", "-u"]).strip() == "10001"
    assert _ok([DOCKER, "run", "--rm", "--user", "10001", brain_image, "id", "-u"]
               ).strip() == "10001"
    refused = _run([DOCKER, "run", "--rm", brain_image], 120)  # the default command
    assert refused.returncode == 2, refused.stderr
    assert "refusing to listen on 0.0.0.0 without BRAIN_API_TOKEN" in refused.stderr
    assert "Traceback" not in refused.stderr
    looked = _run([DOCKER, "run", "--rm", brain_image, "sh", "-c", "command -v mcp-server-time"],
                  120)
    assert looked.returncode != 0 and looked.stdout == ""


WHERE = """
    import socket
    import time

    from brain import shell, step, workflow

    # What a step could read of other processes' environments, watched for 2 s: the pids
    # whose environ holds the API token.
    PEEK = (
        "import os, time\\n"
        "seen, deadline = set(), time.monotonic() + 2\\n"
        "while time.monotonic() < deadline:\\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\\n"
        "        try:\\n"
        "            with open('/proc/' + pid + '/environ', 'rb') as f:\\n"
        "                if b'BRAIN_API_TOKEN=' in f.read():\\n"
        "                    seen.add(pid)\\n"
        "        except OSError:\\n"
        "            pass\\n"
        "    time.sleep(0.005)\\n"
        "print(','.join(sorted(seen)) or 'none', os.getuid())\\n"
    )


    @workflow
    def peek():
        shell("environs", argv=["python3", "-c", PEEK], timeout_seconds=60)


    @step
    def where() -> str:
        time.sleep(1)
        return socket.gethostname()


    @workflow
    def hostname():
        where()
"""


# Run in the serve container as brain: plant urllib/ in the health check's working folder,
# then watch every other process's environ for the token for 7 s (over one interval).
SPY = """
import os, pathlib, shutil, time
planted = pathlib.Path("/srv/brain/urllib")
planted.mkdir()
(planted / "__init__.py").write_text(
    "import os\\nopen('/tmp/hc-imported-' + str(os.getuid()), 'w').close()\\n")
seen, deadline = set(), time.monotonic() + 7
while time.monotonic() < deadline:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"BRAIN_API_TOKEN=" in f.read():
                    seen.add(pid)
        except OSError:
            pass
    time.sleep(0.005)
shutil.rmtree(planted)
imported = [p for p in os.listdir("/tmp") if p.startswith("hc-imported-")]
print(",".join(sorted(seen)) or "none", os.getuid(), ",".join(imported) or "no-import")
"""


def test_compose_upgrades_the_schema_then_serve_queues_and_the_worker_executes(
        brain_image: str, tmp_path: Path) -> None:
    stand_in = "local/postgres:16"
    _build(ROOT / "tests" / "docker" / "postgres16", stand_in, "--build-arg", f"BASE={BASE}")
    flows = tmp_path / "flows"
    flows.mkdir()
    write_source(flows, "where.py", WHERE)
    # The container's user (10001) reads the bind-mounted folder.
    tmp_path.chmod(0o755)
    flows.chmod(0o755)
    (flows / "where.py").chmod(0o644)
    token = secrets.token_hex(16)
    port = free_port()
    # compose.yaml's env_file (brain.env, required by docker-compose 1.x): here a file of
    # the test's own, whose variable both serve and worker must get.
    env_file = tmp_path / "brain.env"
    env_file.write_text("FROM_ENV_FILE=both-containers\n")
    env = {**os.environ, "BRAIN_IMAGE": brain_image, "BRAIN_POSTGRES_IMAGE": stand_in,
           "BRAIN_API_TOKEN": token, "POSTGRES_PASSWORD": secrets.token_hex(8),
           "BRAIN_FLOWS": str(flows), "BRAIN_PORT": str(port), "BRAIN_LOG_FORMAT": "json",
           "BRAIN_ENV_FILE": str(env_file)}
    compose = [*_compose(), "-p", f"braintest{os.getpid()}", "-f", str(ROOT / "compose.yaml")]

    def container(service: str) -> str:
        return _ok([*compose, "ps", "-q", service], 60, env=env, cwd=ROOT).strip()

    def inspect(service: str, template: str) -> str:
        return _ok([DOCKER, "inspect", "-f", template, container(service)], 60).strip()

    try:
        _ok([*compose, "up", "-d"], 600, env=env, cwd=ROOT)
        # The schema upgrade ran, and ended, before serve and worker started.
        assert inspect("migrate", "{{.State.ExitCode}}") == "0"
        migrated = _ok([*compose, "logs", "--no-color", "migrate"], 60, env=env, cwd=ROOT)
        assert "schema upgraded from empty to revision" in migrated
        assert "brain:***@postgres" in migrated  # the password is not shown
        assert (inspect("migrate", "{{.State.FinishedAt}}")
                <= inspect("serve", "{{.State.StartedAt}}"))
        assert (inspect("migrate", "{{.State.FinishedAt}}")
                <= inspect("worker", "{{.State.StartedAt}}"))
        hosts = {inspect(s, "{{.Config.Hostname}}"): s for s in ("serve", "worker")}
        for service in ("serve", "worker"):
            assert _ok([DOCKER, "exec", container(service), "printenv", "FROM_ENV_FILE"],
                       60).strip() == "both-containers", service

        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if api.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "brain serve never answered /health"
                time.sleep(0.5)
            assert httpx.post(f"{base}/api/workflows/hostname/runs", json={}).status_code == 401
            run_ids = [api.post("/api/workflows/hostname/runs", json={}).json()["run_id"]
                       for _ in range(16)]
            deadline = time.monotonic() + 120
            while True:
                runs = [api.get(f"/api/runs/{run_id}").json() for run_id in run_ids]
                if all(r["status"] in ("succeeded", "failed", "cancelled") for r in runs):
                    break
                assert time.monotonic() < deadline, [r["status"] for r in runs]
                time.sleep(0.5)
            workers = api.get("/api/workers").json()
            peek = api.post("/api/workflows/peek/runs", json={}).json()["run_id"]
            deadline = time.monotonic() + 60
            while (peeked := api.get(f"/api/runs/{peek}").json())["status"] in ("queued",
                                                                                  "running"):
                assert time.monotonic() < deadline, peeked
                time.sleep(0.5)
        # A step runs as brain (10001) and reads no process's secrets: neither The Brain's
        # nor those of the init process or the health check, which run as root.
        assert peeked["status"] == "succeeded", peeked
        assert peeked["steps"][0]["output"] == "none 10001"
        # The same from inside the serve container for longer than a health check interval
        # (it runs every 5 s, as root), with a module planted where a non-isolated Python
        # would import it from. (Not beside the step: this very process of brain's holds the
        # container's environment until `env -i` replaces it.)
        spied = _ok([DOCKER, "exec", "-u", "10001", container("serve"), "env", "-i",
                     "/opt/brain/bin/python3", "-c", SPY], 60)
        assert spied.split() == ["none", "10001", "no-import"], spied
        assert [r["status"] for r in runs] == ["succeeded"] * 16
        executed_on = [hosts.get(r["steps"][0]["output"]) for r in runs]
        assert None not in executed_on  # every run ran in one of the two containers
        assert "worker" in executed_on  # queued through serve's API, executed by the worker
        assert {(w["kind"], w["host"]) for w in workers if not w["lost"]} == {
            (service, host) for host, service in hosts.items()}
        # Each run's start and end are logged, as JSON, by the container that executed it.
        worker_log = _ok([*compose, "logs", "--no-color", "--no-log-prefix", "worker"], 60,
                         env=env, cwd=ROOT)
        ended = [json.loads(line) for line in worker_log.splitlines()
                 if line.startswith("{") and '"status"' in line]
        # (The peek run may have been executed by either container.)
        assert {e["run_id"] for e in ended} - {peek} == {
            r["run_id"] for r, where in zip(runs, executed_on, strict=True) if where == "worker"}
        # The image's health check reports serve healthy.
        deadline = time.monotonic() + 60
        while inspect("serve", "{{.State.Health.Status}}") != "healthy":
            assert time.monotonic() < deadline, inspect("serve", "{{json .State.Health}}")
            time.sleep(1)
    finally:
        down = _run([*compose, "down", "-v", "--remove-orphans"], 300, env=env, cwd=ROOT)
    assert down.returncode == 0, down.stderr
    assert _ok([DOCKER, "ps", "-aq", "--filter",
                f"label=com.docker.compose.project=braintest{os.getpid()}"], 60).strip() == ""


def test_the_derived_image_adds_the_time_server_and_runs_its_workflow(brain_image: str) -> None:
    derived = f"brain-time-test:{uuid.uuid4().hex[:8]}"
    _build(ROOT / "examples" / "docker-mcp", derived, "--build-arg", f"BRAIN_IMAGE={brain_image}")
    try:
        out = _ok([DOCKER, "run", "--rm", derived, "brain", "run",
                   "/srv/brain/flows/what_time.py", "--json"], 300)
    finally:
        _run([DOCKER, "image", "rm", "-f", derived], 120)
    run = json.loads(out)
    assert run["status"] == "succeeded", run
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["bucharest"]["kind"] == "mcp_tool"
    assert json.loads(steps["tokyo"]["output"])["timezone"] == "Asia/Tokyo"
    lines = steps["clocks"]["output"].splitlines()
    assert [line.split(":")[0] for line in lines] == ["Europe/Bucharest", "Asia/Tokyo"]
