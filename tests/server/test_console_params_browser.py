"""The console's run form, drawn from a workflow's parameters, in a real headless Chromium
(Debian's package, driven by Playwright) against a real ``brain serve``: one typed field per
parameter with required ones marked and defaults filled in; filled and submitted, it starts
the run and shows it (its parameters and output on the run page); an invalid field shows
the server's error beside it, and nothing is queued."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from serve_support import CHROMIUM, BrainServer, brain_argv, clean_env
from support import write_source

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

from playwright.sync_api import expect

FLOWS = """
    from enum import Enum
    from typing import Annotated, Literal

    from pydantic import Field

    from brain import shell, workflow


    class Size(Enum):
        small = "small"
        large = "large"


    @workflow
    def deploy(service: Annotated[str, Field(description="what to deploy")],
               replicas: int = 2, ratio: float = 0.5,
               env: Literal["staging", "prod"] = "staging", dry_run: bool = False,
               size: Size = Size.small, tags: list[int] = [1, 2]):
        \"\"\"Deploys a service.\"\"\"
        shell("plan", argv=["echo", f"{service} x{replicas} to {env} dry={dry_run}"])
        return {"service": service, "replicas": replicas, "tags": tags}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("console-params")
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    srv = BrainServer(brain_argv(), folder, root, clean_env(root / "brain.db"))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def page(browser: Any, server: BrainServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        yield page
    finally:
        context.close()


def field(page: Any, name: str) -> Any:
    return page.locator(f'#wf-deploy .param[data-param="{name}"]')


def test_one_typed_field_per_parameter_required_marked_defaults_filled(
        page: Any, server: BrainServer) -> None:
    page.goto(server.url + "/")
    kinds = {name: field(page, name).get_attribute("data-kind")
             for name in ("service", "replicas", "ratio", "env", "dry_run", "size", "tags")}
    assert kinds == {"service": "text", "replicas": "number", "ratio": "number",
                     "env": "select", "dry_run": "checkbox", "size": "select",
                     "tags": "json"}
    expect(field(page, "service").locator("abbr.required")).to_have_count(1)
    expect(field(page, "replicas").locator("abbr.required")).to_have_count(0)
    expect(field(page, "service").locator("input")).to_have_attribute("required", "")
    expect(field(page, "service")).to_contain_text("what to deploy")
    expect(field(page, "replicas").locator("input")).to_have_value("2")
    expect(field(page, "ratio").locator("input")).to_have_value("0.5")
    expect(field(page, "env").locator("select")).to_have_value('"staging"')
    expect(field(page, "size").locator("select")).to_have_value('"small"')
    expect(field(page, "dry_run").locator("input")).not_to_be_checked()
    assert json.loads(field(page, "tags").locator("textarea").input_value()) == [1, 2]


def test_fill_submit_and_see_the_run_with_its_params_and_output(
        page: Any, server: BrainServer) -> None:
    page.goto(server.url + "/")
    field(page, "service").locator("input").fill("api")
    field(page, "replicas").locator("input").fill("3")
    field(page, "env").locator("select").select_option(label="prod")
    field(page, "dry_run").locator("input").check()
    field(page, "tags").locator("textarea").fill("[7]")
    page.locator("#wf-deploy button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    params = page.locator("#run-params")
    expect(params).to_contain_text("api")
    expect(params).to_contain_text("prod")
    run_id = page.url.rsplit("/", 1)[1]
    run = server.run(run_id)
    assert run["params"] == {"service": "api", "replicas": 3, "ratio": 0.5, "env": "prod",
                             "dry_run": True, "size": "small", "tags": [7]}
    output = page.locator("#run-output pre")
    output.wait_for()
    assert json.loads(output.inner_text()) == {"service": "api", "replicas": 3, "tags": [7]}
    expect(page.locator("#step-plan")).to_be_attached()


def test_an_invalid_field_shows_its_error_by_the_field_and_queues_nothing(
        page: Any, server: BrainServer) -> None:
    before = server.run_ids("deploy")
    page.goto(server.url + "/")
    field(page, "service").locator("input").fill("api")
    field(page, "tags").locator("textarea").fill('["x", 2]')  # not a list of ints
    page.locator("#wf-deploy button[type=submit]").click()
    error = field(page, "tags").locator("output.field-error")
    expect(error).not_to_be_empty()
    assert error.inner_text().startswith("0:"), error.inner_text()  # the item it names
    expect(field(page, "tags").locator("textarea")).to_have_attribute("aria-invalid", "true")
    expect(field(page, "service").locator("output.field-error")).to_be_empty()
    assert page.url == server.url + "/"
    assert server.run_ids("deploy") == before

    field(page, "tags").locator("textarea").fill("[not json")  # caught before sending
    page.locator("#wf-deploy button[type=submit]").click()
    expect(error).to_contain_text("not JSON")
    assert server.run_ids("deploy") == before
