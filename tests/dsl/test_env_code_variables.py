"""A placeholder may not fill an environment variable that chooses code (SPEC §3, issue 30).

``env={"PATH": trigger.body}`` let a trigger pick the program a ``shell`` step or an MCP
``server_command`` starts; ``LD_PRELOAD``, ``BASH_ENV``, ``PYTHONSTARTUP``,
``GIT_SSH_COMMAND``... run what they name. The names come from one table
(:mod:`brain.shell_check.environment`), in any case and, for families, with any suffix;
both step kinds refuse them when the workflow is decorated, with an error that says why
and what to write instead. Other names stay data, and a value written out or a
``secret()`` is still fine for the table's names.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import definition_error

from brain import WorkflowDefinitionError, mcp_tool, secret, shell, trigger, workflow
from brain.dsl.model import ShellStepSpec
from brain.shell_check.environment import (
    CODE_INFIXES,
    CODE_PREFIXES,
    CODE_SUFFIXES,
    CODE_VARIABLES,
    DATA_VARIABLES,
    chooses_code,
)

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(set().union(*CODE_VARIABLES.values()))
PLACEHOLDERS = ["{trigger.body}", "{trigger.headers.x-path}", "{previous.out}",
                "/opt/{trigger.body}/bin", "{trigger.body}:/usr/bin"]


def _case_variants(name: str) -> st.SearchStrategy[str]:
    """``name`` in upper, lower or mixed case."""
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda ups: "".join(c.upper() if up else c.lower() for c, up in zip(name, ups,
                                                                             strict=True)))


def _family_member(prefix: str) -> st.SearchStrategy[str]:
    return st.from_regex(r"[A-Z0-9_]{1,12}", fullmatch=True).map(lambda tail: prefix + tail)


def _suffix_member(suffix: str) -> st.SearchStrategy[str]:
    return st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True).map(lambda head: head + suffix)


def _infix_member(infix: str) -> st.SearchStrategy[str]:
    return st.tuples(st.from_regex(r"[A-Z_]{0,6}", fullmatch=True),
                     st.from_regex(r"[A-Z_]{0,6}", fullmatch=True)).map(
        lambda parts: parts[0] + infix + parts[1])


CODE_NAMES = st.one_of(
    st.sampled_from(NAMES).flatmap(_case_variants),
    st.sampled_from(sorted(CODE_PREFIXES)).flatmap(_family_member),
    st.sampled_from(sorted(CODE_SUFFIXES)).flatmap(_suffix_member),
    st.sampled_from(sorted(CODE_INFIXES)).flatmap(_infix_member),
    st.sampled_from(["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP", "PYTHONPATH",
                     "PERL5OPT", "GIT_SSH_COMMAND", "GIT_CONFIG_PARAMETERS", "BASH_FUNC_ls%%",
                     "NPM_CONFIG_SCRIPT_SHELL", "npm_config_node_options", "DYLD_INSERT_LIBRARIES"]),
).filter(lambda name: name.upper() not in DATA_VARIABLES)


def _shell_with_env(name: str, value: str) -> None:
    shell("run", command="deploy --now", env={name: value})


def _mcp_with_env(name: str, value: str) -> None:
    mcp_tool("m", server_command="atk-mcp-server --stdio", tool="t", env={name: value})


@settings(max_examples=60, deadline=None)
@given(name=CODE_NAMES, value=st.sampled_from(PLACEHOLDERS),
       kind=st.sampled_from([_shell_with_env, _mcp_with_env]))
def test_a_placeholder_in_a_variable_that_chooses_code_is_a_definition_error(
        name: str, value: str, kind: object) -> None:
    def body() -> None:
        previous = shell("out", command="echo /tmp")
        del previous
        kind(name, value)  # type: ignore[operator]

    message = definition_error(body, name="env_code")
    assert f"env[{name!r}] holds a placeholder" in message
    assert "chooses" in message and "MY_VALUE" in message  # why, and what to write instead


# Ordinary names: none of the table's names, none of its families.
ORDINARY = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True).filter(
    lambda name: chooses_code(name) is None)


@settings(max_examples=60, deadline=None)
@given(name=ORDINARY, value=st.sampled_from(PLACEHOLDERS),
       kind=st.sampled_from([_shell_with_env, _mcp_with_env]))
def test_a_placeholder_in_an_ordinary_variable_is_accepted(name: str, value: str,
                                                          kind: object) -> None:
    def body() -> None:
        shell("out", command="echo /tmp")
        kind(name, value)  # type: ignore[operator]

    workflow(name="env_data")(body)


#: Names an attack found missing (issue 30, round 4): each runs a program or code, or
#: points at a configuration that does. The suffix, prefix and infix rules catch most.
ROUND4_NAMES = (
    "TAR_OPTIONS ZIPOPT RSYNC_RSH RSYNC_CONNECT_PROG CVS_RSH SVN_SSH FCEDIT KUBE_EDITOR "
    "KUBECTL_EXTERNAL_DIFF SYSTEMD_EDITOR GH_EDITOR GH_PAGER GH_BROWSER HGEDITOR SVN_EDITOR "
    "PSQL_EDITOR PSQL_PAGER FZF_DEFAULT_COMMAND FZF_DEFAULT_OPTS CCACHE_PREFIX VIMINIT EXINIT "
    "PSQLRC HGRCPATH RIPGREP_CONFIG_PATH TF_CLI_CONFIG_FILE ANSIBLE_CONFIG GOENV MAVEN_OPTS "
    "GRADLE_OPTS SBT_OPTS ANT_OPTS DOTNET_STARTUP_HOOKS CORECLR_PROFILER_PATH RUSTFLAGS CFLAGS "
    "LDFLAGS CGO_CFLAGS GCC_EXEC_PREFIX COMPILER_PATH NODE_REPL_EXTERNAL_MODULE "
    "ELECTRON_RUN_AS_NODE BROWSER VISUAL SUDO_ASKPASS SSH_ASKPASS GIT_ASKPASS").split()


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(ROUND4_NAMES).flatmap(_case_variants))
def test_the_names_the_attack_found_choose_code_in_any_case(name: str) -> None:
    assert chooses_code(name) is not None
    with pytest.raises(WorkflowDefinitionError, match="chooses"):
        workflow(name="env_round4")(lambda: _shell_with_env(name, "{trigger.body}"))


@pytest.mark.parametrize("name", ["GREETING", "MY_PATH_SUFFIX", "PATH_TO_REPORT", "NODE_ENV",
                                  "TZ", "LANG", "GIT_AUTHOR_NAME", "GIT_COMMITTER_EMAIL",
                                  "PYTHONUNBUFFERED", "LESSON", "TARGET_HOST", "RELEASE_TAG",
                                  "MY_VALUE", "FEATURE_FLAGS", "SRC", "RC"])
def test_where_the_line_is_drawn(name: str) -> None:
    assert chooses_code(name) is None
    workflow(name="env_line")(lambda: _shell_with_env(name, "{trigger.body}"))


def test_a_literal_value_or_a_secret_still_fills_a_variable_that_chooses_code() -> None:
    @workflow(name="env_literal")
    def literal() -> None:
        shell("a", command="tool", env={"PATH": "/opt/tool/bin:/usr/bin", "LD_PRELOAD": ""})
        mcp_tool("m", server_command="srv", tool="t", env={"PATH": secret("TOOL_PATH")})

    shell_spec = next(s for s in literal.spec.steps if s.name == "a")
    assert isinstance(shell_spec, ShellStepSpec)
    assert shell_spec.env == {"PATH": "/opt/tool/bin:/usr/bin", "LD_PRELOAD": ""}


def test_the_error_names_the_workflow_the_step_and_the_variable() -> None:
    with pytest.raises(WorkflowDefinitionError) as info:
        @workflow(name="deploy")
        def deploy() -> None:
            shell("run", command="./deploy.sh", env={"PATH": trigger.body})
    text = str(info.value)
    assert "'deploy'" in text and "'run'" in text and "PATH" in text and "{trigger.body}" in text


def test_the_docs_list_every_name_and_family_of_the_table() -> None:
    text = (ROOT / "docs" / "placeholders.md").read_text()
    missing = [n for n in NAMES if f"`{n}`" not in text]
    missing += [p for p in CODE_PREFIXES if f"`{p}*`" not in text]
    missing += [s for s in CODE_SUFFIXES if f"`*{s}`" not in text]
    missing += [i for i in CODE_INFIXES if f"`*{i}*`" not in text]
    missing += [n for n in DATA_VARIABLES if f"`{n}`" not in text]
    assert not missing, f"docs/placeholders.md does not list: {missing}"


def test_without_the_check_the_variable_really_chooses_the_program(tmp_path: Path) -> None:
    """Why ``PATH`` is in the table: the value, given as PATH, picks the program a fixed
    command line starts (here ``tool``, found in the folder the value names)."""
    evil = tmp_path / "evil-bin"
    evil.mkdir()
    marker = tmp_path / "chosen"
    (evil / "tool").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (evil / "tool").chmod(0o755)
    subprocess.run(["/bin/sh", "-c", "tool"], env={"PATH": f"{evil}:/usr/bin:/bin"},
                   capture_output=True, timeout=10, check=False)
    assert marker.exists()
    # and PYTHONSTARTUP-like families: PYTHONPATH makes python import the value's module
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker) + '2'!r}, 'w').close()\n")
    subprocess.run([sys.executable, "-c", "pass"], env={"PYTHONPATH": str(tmp_path)},
                   capture_output=True, timeout=30, check=False)
    assert Path(str(marker) + "2").exists()
