"""The environment variables that choose code (SPEC §3, shell safety): one table.

A placeholder may fill an ``env=`` value of ``shell`` and ``mcp_tool``, and the value
goes to the process byte for byte, so it stays data as long as nothing reads that
variable as code, as the program to run or as where to load code from. These are
the variables the shells, the dynamic loader, the common interpreters and tools do
read that way: ``PATH`` picks the program ``server_command`` starts,
``LD_PRELOAD`` loads a library into it, ``BASH_ENV`` is a script every
non-interactive bash runs first, ``PYTHONSTARTUP``, ``NODE_OPTIONS=--require``,
``GIT_SSH_COMMAND``, ``EDITOR``, ``PAGER`` and ``PS4`` run what they name.

Names are compared in upper case (Windows ignores the case, zsh ties ``path`` to
``PATH``, npm reads ``npm_config_*`` in both). A name is refused when it is in
:data:`CODE_VARIABLES`, starts with one of :data:`CODE_PREFIXES`, ends with one of
:data:`CODE_SUFFIXES` or holds one of :data:`CODE_INFIXES`, unless it is one of
:data:`DATA_VARIABLES` (a commit's author or date: data git only records). Other
names are data: ``GREETING``, ``MY_PATH_SUFFIX``, ``NODE_ENV``, ``PATH_TO_REPORT``.
``docs/placeholders.md`` lists the table; a variable your own program reads as code
is yours, as ``eval "$VAR"`` is.
"""

from __future__ import annotations

from brain import placeholders


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Whole names, by what they choose.
CODE_VARIABLES: dict[str, frozenset[str]] = {
    "the program to run, found on this search path": _set(
        "PATH CDPATH FPATH ZDOTDIR BASH_LOADABLES_PATH"),
    "shell code the shell runs or expands": _set(
        "ENV BASH_ENV PS0 PS1 PS2 PS3 PS4 PROMPT_COMMAND IFS SHELLOPTS BASHOPTS"),
    "a library the loader or a converter loads into the program": _set(
        "GCONV_PATH LOCPATH OPENSSL_CONF OPENSSL_ENGINES OPENSSL_MODULES"),
    "code an interpreter loads or runs first": _set(
        "NODE_OPTIONS NODE_PATH RUBYOPT RUBYLIB GEM_HOME GEM_PATH BUNDLE_GEMFILE "
        "JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS JAVA_OPTS CLASSPATH JAVA_HOME "
        "TCLLIBPATH PHPRC PHP_INI_SCAN_DIR R_PROFILE R_PROFILE_USER R_ENVIRON R_ENVIRON_USER "
        "R_LIBS R_LIBS_USER JULIA_LOAD_PATH JULIA_DEPOT_PATH JULIA_PROJECT GOFLAGS GOTOOLCHAIN "
        "GOROOT CC CXX CPP LD RUSTC RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER MAKEFLAGS MFLAGS "
        "MAKEFILES GOENV GOPATH GOBIN GOCACHE GOMODCACHE GOWORK GOPROXY GOSUMDB GONOSUMDB "
        "GONOSUMCHECK GOPRIVATE GOINSECURE GCC_EXEC_PREFIX COMPILER_PATH LIBRARY_PATH CPATH "
        "C_INCLUDE_PATH CPLUS_INCLUDE_PATH OBJC_INCLUDE_PATH AR AS NM RANLIB STRIP OBJCOPY FC "
        "F77 HOSTCC CROSS_COMPILE NVCC VIRTUAL_ENV MAVEN_ARGS GRADLE_USER_HOME IPYTHONDIR "
        "ZIPOPT"),
    "a program a tool runs (an editor, a pager, a password prompt, a browser)": _set(
        "EDITOR VISUAL PAGER MANPAGER MANOPT SYSTEMD_PAGER SHELL BROWSER SSH_ASKPASS "
        "SUDO_ASKPASS SUDO_EDITOR TERMINAL LESS LESSOPEN LESSCLOSE LESSKEY LESSKEYIN "
        "LESSEDIT FCEDIT SYSTEMD_LESS CVS_SERVER"),
    "a configuration file whose settings run programs": _set(
        "HOME XDG_CONFIG_HOME XDG_CONFIG_DIRS KUBECONFIG DOCKER_CONFIG DOCKER_HOST "
        "AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE GNUPGHOME INPUTRC PSQLRC IRBRC MAILRC "
        "WGETRC SCREENRC CONDARC VIMINIT GVIMINIT EXINIT MYVIMRC HGRCPATH DOCKER_CONTEXT "
        "AWS_PROFILE AWS_DEFAULT_PROFILE"),
}

#: Families, by prefix (``LD_PRELOAD``, ``PYTHONSTARTUP``, ``GIT_SSH_COMMAND`` ...).
CODE_PREFIXES: dict[str, str] = {
    "LD_": "a library the dynamic loader loads into every program",
    "DYLD_": "a library the dynamic loader loads into every program",
    "BASH_FUNC_": "a shell function bash imports",
    "PYTHON": "code Python loads or runs first (PYTHONSTARTUP, PYTHONPATH, "
              "PYTHONBREAKPOINT ...)",
    "PERL": "code Perl loads or runs first (PERL5OPT, PERL5LIB, PERL5DB ...)",
    "RUBY": "code Ruby loads first",
    "LUA_": "code Lua loads or runs first (LUA_INIT, LUA_PATH ...)",
    "GIT_": "a program or configuration git runs (GIT_SSH_COMMAND, GIT_EXEC_PATH, "
            "GIT_CONFIG_*, GIT_DIR ...)",
    "NPM_CONFIG_": "npm configuration (script-shell, node-options ...)",
    "YARN_": "yarn configuration that runs programs",
    "PIP_": "where pip fetches the packages it builds and installs",
    "UV_": "which Python uv runs and where it fetches packages",
    "CARGO_": "a program cargo runs (a runner, rustc, a configuration)",
    "CCACHE_": "a program ccache runs before the compiler (CCACHE_PREFIX ...)",
    "CGO_": "the flags cgo passes to the C compiler and linker (-fplugin=, -B ...)",
    "NODE_": "code node loads (NODE_OPTIONS, NODE_REPL_EXTERNAL_MODULE ...)",
    "ELECTRON_": "how an Electron app runs (ELECTRON_RUN_AS_NODE makes it node)",
    "DOTNET_": "code the .NET runtime loads (DOTNET_STARTUP_HOOKS ...)",
    "CORECLR_": "a profiler library the .NET runtime loads",
    "COMPLUS_": "the .NET runtime's configuration",
    "XDG_": "where programs find their configuration, and the applications that open files",
}

#: Families, by suffix: a program a tool runs (``GIT_EDITOR``, ``GH_PAGER``, ``RSYNC_RSH``,
#: ``FZF_DEFAULT_COMMAND``), options of a tool (``TAR_OPTIONS``, ``MAVEN_OPTS``: tar's
#: ``--checkpoint-action=exec=``, a JVM's ``-XX:OnError=``, fzf's ``--bind …execute``),
#: a compiler's flags (``CFLAGS``: ``-fplugin=``, ``-B``).
CODE_SUFFIXES: dict[str, str] = {
    "EDITOR": "the editor a tool runs",
    "PAGER": "the pager a tool runs",
    "_RSH": "the remote shell a tool runs",
    "_SSH": "the ssh program a tool runs",
    "ASKPASS": "the password prompt program a tool runs",
    "_BROWSER": "the browser a tool runs",
    "_SHELL": "the shell a tool runs its commands with",
    "_COMMAND": "a command a tool runs",
    "_CMD": "a command a tool runs",
    "_PROG": "a program a tool runs",
    "_PROGRAM": "a program a tool runs",
    "_WRAPPER": "a program a tool runs the real one through",
    "_HOOK": "code a tool runs at a given moment",
    "_HOOKS": "code a tool runs at a given moment",
    "_EXTERNAL_DIFF": "the diff program a tool runs",
    "_OPTS": "a tool's options (a JVM's -javaagent: or -XX:OnError=, fzf's --bind execute)",
    "_OPTIONS": "a tool's options (tar's --checkpoint-action=exec=, node's --require)",
    "CFLAGS": "a compiler's flags (-fplugin=, -B, -wrapper)",
    "CXXFLAGS": "a compiler's flags (-fplugin=, -B, -wrapper)",
    "CPPFLAGS": "a compiler's flags (-fplugin=, -B, -wrapper)",
    "LDFLAGS": "the linker's flags (-fuse-ld=, -B, --plugin)",
    "FFLAGS": "a compiler's flags (-fplugin=, -B, -wrapper)",
    "RUSTFLAGS": "rustc's flags (-C linker=, -Z plugins)",
    "RUSTDOCFLAGS": "rustdoc's flags (-C linker=)",
}

#: A name holding one of these anywhere points at a configuration whose settings run
#: programs (``ANSIBLE_CONFIG``, ``TF_CLI_CONFIG_FILE``, ``RIPGREP_CONFIG_PATH``).
CODE_INFIXES: dict[str, str] = {
    "CONFIG": "a configuration file or folder whose settings run programs",
}

#: Names of the families above that are plain data.
DATA_VARIABLES = _set(
    "GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_AUTHOR_DATE GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL "
    "GIT_COMMITTER_DATE PYTHONUNBUFFERED PYTHONIOENCODING PYTHONHASHSEED PYTHONUTF8 "
    "PYTHONDONTWRITEBYTECODE NODE_ENV")


def chooses_code(name: str) -> str | None:
    """What the environment variable ``name`` chooses, when it chooses code, else ``None``.

    >>> chooses_code("LD_PRELOAD")
    'a library the dynamic loader loads into every program'
    >>> chooses_code("GREETING") is None, chooses_code("GIT_AUTHOR_NAME") is None
    (True, True)
    """
    upper = name.upper()
    if upper in DATA_VARIABLES:
        return None
    for what, names in CODE_VARIABLES.items():
        if upper in names:
            return what
    return next((what for prefix, what in CODE_PREFIXES.items() if upper.startswith(prefix)),
                None) \
        or next((what for suffix, what in CODE_SUFFIXES.items() if upper.endswith(suffix)),
                None) \
        or next((what for infix, what in CODE_INFIXES.items() if infix in upper), None)


def env_problem(name: str, value: str) -> str | None:
    """Why a placeholder may not fill environment variable ``name`` (its value template
    ``value``), or ``None``: a variable that chooses code takes only literal values.

    >>> env_problem("GREETING", "hello {who}") is None
    True
    >>> env_problem("PATH", "/opt/bin:/usr/bin") is None
    True
    >>> print(env_problem("PATH", "{trigger.body}"))  # doctest: +ELLIPSIS
    env['PATH'] holds a placeholder ({trigger.body}), but PATH chooses the program to run...
    """
    what = chooses_code(name)
    if what is None or not placeholders.has_placeholders(value):
        return None
    first = next(p.text for p in placeholders.parse(value) if isinstance(p, placeholders.Ref))
    return (f"env[{name!r}] holds a placeholder ({first}), but {name} chooses {what}, so the "
            f"value would choose the code that runs; write {name}'s value literally, and pass "
            f"the data under a name of your own (env={{'MY_VALUE': ...}}, read as \"$MY_VALUE\")")
