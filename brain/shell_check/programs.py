"""The programs that treat an argument as code or as the program to run (SPEC §3).

One table, shared by ``shell(command=...)``, ``shell(argv=[...])`` and the words
of ``mcp_tool(server_command=...)``: for each program, what it does with its
arguments that a placeholder value must not reach. ``docs/placeholders.md``
lists it, and ``tests/test_shell_programs.py`` shows for every row that a
value in the refused place really runs when the check is skipped.

How a program reads its arguments, by :class:`Program.runs`:

``code``
    every argument may be code (``eval``, ``ssh``, ``sqlite3``'s ``.shell``,
    ``tmux`` commands, ``vim -c``): no placeholder argument at all.
``names``
    a shell builtin taking variable names, options or arithmetic, where bash
    evaluates ``a[$(…)]``: no placeholder argument at all.
``program``
    runs the program named after its options and ``leading`` fixed words
    (``env``, ``timeout 5``, ``setarch x86_64``, ``npx -y``): placeholders only
    after that program, which must be written literally (and is itself checked).
    A ``--`` ends the options: the word after it (and the fixed words) is the
    program, for every such row (``tini -s -- {x}`` is refused).
``subcommand``
    runs a program after one of ``subcommands`` (``npm exec``, ``docker run
    IMAGE``): no placeholder after those. After one of ``wraps`` (``uv run``,
    ``op run``, ``aws-vault exec PROFILE``) the words are checked as a
    ``program`` row's are: the program must be written out, and is checked in
    turn (``uv run script.py {x}``). After the ``--`` of one of
    ``data_after_dashes`` the words are data for a script (``npm run build --
    {x}``: npm quotes them).
``shell``
    a shell: the script after ``-c`` or the script file is code; data only after
    a literal script.
``text``
    an interpreter whose program text is code (``sed``, ``awk``, ``python -c``):
    placeholders only after the literal program text.
``options``
    an option of it runs a program (``git -c``/``--upload-pack``, ``tar
    --to-command``, ``rsync -e``): a placeholder may not start a word where an
    option could stand, only after ``--`` or as the value of one of
    ``value_options``.

A here-string or ``<`` redirection holding a placeholder may feed only a
program of none of these kinds, an ``options`` one, or a shell or interpreter
given its program literally (``sh -c '…' <<< {x}``, ``python3 job.py < {x}``):
the others may read standard input as their program. The same holds for a step's
``stdin=`` holding a placeholder (:func:`brain.shell_check.stdin_problem`).
"""

from __future__ import annotations

import re

from brain.shell_check.npm import npm_command
from brain.shell_check.program_row import Program, Runs

__all__ = ["CODE_MODULES", "FIND_NAMES", "PROGRAMS", "Program", "canonical_name", "program_of",
           "reads_stdin"]


def _rows(runs: Runs, why: str, names: str, **kw: object) -> dict[str, Program]:
    program = Program(runs, why, **kw)  # type: ignore[arg-type]
    return {name: program for name in names.split()}


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_SHELL_ARG_OPTIONS = _set("-o +o -O +O --rcfile --init-file")
#: node's options that take the next word as their argument (``node --help``, and newer
#: releases'): the program text or script comes after it.
_NODE_ARG_OPTIONS = _set("""
-r --require -C --conditions --import --input-type --loader --experimental-loader --title
--env-file --env-file-if-exists --allow-fs-read --allow-fs-write --build-snapshot-config
--cpu-prof-dir --cpu-prof-interval --cpu-prof-name --diagnostic-dir --disable-proto
--disable-warning --dns-result-order --experimental-default-type --experimental-policy
--experimental-sea-config --experimental-config-file --heap-prof-dir --heap-prof-interval
--heap-prof-name --heapsnapshot-near-heap-limit --heapsnapshot-signal --icu-data-dir
--inspect-port --debug-port --inspect-publish-uid --localstorage-file --max-http-header-size
--network-family-autoselection-attempt-timeout --openssl-config --policy-integrity
--redirect-warnings --report-directory --report-dir --report-filename --report-signal
--secure-heap --secure-heap-min --snapshot-blob --test-concurrency --test-name-pattern
--test-skip-pattern --test-reporter --test-reporter-destination --test-shard --test-timeout
--test-isolation --test-coverage-include --test-coverage-exclude --test-coverage-branches
--test-coverage-functions --test-coverage-lines --test-global-setup --tls-cipher-list
--tls-keylog --trace-event-categories --trace-event-file-pattern --trace-require-module
--unhandled-rejections --use-largepages --v8-pool-size --watch-path --watch-kill-signal
""")
#: npm's commands (by their canonical names) that run a program, a shell or a named
#: package's scripts, install or fetch a package (its scripts run), write a setting or
#: script that later runs (config, pkg), or open the configured browser or editor.
#: ``version`` and ``publish`` run only the project's own scripts.
_NPM_RUNS = _set("exec explore run test start stop restart install install-test "
                 "install-ci-test ci link init update rebuild dedupe pack cache diff "
                 "config set pkg edit approve-scripts deny-scripts install-scripts docs "
                 "bugs repo help fund audit prune uninstall")

#: The table. A name missing here is a program that reads its arguments as data.
PROGRAMS: dict[str, Program] = {
    # Shell builtins and programs whose arguments are code.
    **_rows("code", "runs its arguments as shell code",
            "eval . source trap alias unalias bind complete compgen compopt enable fc history "
            "jobs watch script parallel su runuser capsh run-parts"),
    **_rows("code", "runs its arguments as commands (a remote or inner shell)",
            "ssh tmux screen flock sg newgrp at batch socat start-stop-daemon perf "
            "mosh autossh dbclient rsh rlogin pssh parallel-ssh pdsh clush dsh mussh salt "
            "salt-call salt-ssh knife fab pyinfra zellij byobu"),
    **_rows("code", "runs its arguments as commands through a shell (a benchmark, a watcher, "
            "a queue)", "hyperfine watchexec nodemon reflex sem pueue"),
    **_rows("code", "installs or submits the file it names (or reads) as a job or a crontab",
            "crontab sbatch bsub qsub"),
    **_rows("code", "runs the command given with -e (or its arguments) in a terminal",
            "xterm uxterm gnome-terminal konsole urxvt rxvt kitty alacritty terminator "
            "xfce4-terminal tilix wezterm foot lxterminal mate-terminal"),
    **_rows("code", "runs its script or the code given with -e (AppleScript, Puppet, Chef)",
            "osascript puppet chef-apply"),
    **_rows("code", "runs the program named after options, some of which take two arguments",
            "bwrap"),
    **_rows("code", "runs queries and its own commands (a shell escape, --eval) from its "
            "arguments and stdin", "mongosh mongo duckdb sqlcmd usql pgcli mycli litecli "
            "sqlplus beeline hive impala-shell"),
    **_rows("code", "runs code from its arguments or standard input (a REPL or evaluator)",
            "irb pry psysh jshell iex erl spark-shell pyspark clojure clj gnuplot octave "
            "matlab mlr rake nix-shell"),
    **_rows("code", "runs the module, test file, application or task its arguments name "
            "(pydoc imports it, a test runner or server loads it, prove --exec=PROG)",
            "pydoc pytest py.test prove uvicorn gunicorn coverage flask celery tox nox"),
    **_rows("code", "runs the program named after a varying number of words (locations, a "
            "subcommand)", "hwloc-bind uftrace"),
    **_rows("code", "runs SQL and its own commands (.shell, \\!) from its arguments and stdin",
            "sqlite3 mysql mariadb"),
    **_rows("code", "runs SQL and its own commands (\\!) from its arguments and stdin", "psql",
            variable_options=_set("-v --set --variable")),
    **_rows("code", "runs the command given with -c/-e (or its arguments) as a program",
            "nc ncat netcat man ansible ansible-playbook"),
    **_rows("code", "runs its arguments or standard input as code (dc's !, m4's syscmd, "
            "julia -e, R -e, IPython)", "dc m4 julia R ipython ipython3 bpython ptpython"),
    **_rows("code", "runs its script or commands from its arguments (-c, -e, -ex, +cmd)",
            "expect gdb gdbtui vim vi nvim view ex ed vimdiff gvim rvim rview evim editor "
            "sensible-editor emacs pwsh powershell tclsh wish make gmake"),
    **_rows("code", "runs code, a script or a program from its arguments (-e, -c, a script "
            "file, lldb -o, cmake -P and -E env, dotnet run and its projects' build code)",
            "guile racket raku rakudo perl6 lldb nu xonsh elvish dotnet cmake ctest"),
    **_rows("names", "takes variable names, options or arithmetic (bash evaluates a[$(…)] there)",
            "let declare typeset local export readonly unset read readarray mapfile getopts "
            "wait set shopt hash select ulimit caller shift return exit break continue"),
    # Programs that run the program named in their arguments.
    **_rows("program", "runs the program named in its arguments",
            "command builtin exec nohup time setsid sudo doas ionice "
            "unbuffer busybox toybox coproc strace ltrace setpriv unshare nsenter systemd-run firejail "
            "valgrind catchsegv fakeroot proot torsocks proxychains proxychains4 caffeinate "
            "chpst softlimit prlimit pkexec uvx npx bunx pnpx "
            "entr rlwrap x86_64 i386 i686 linux32 linux64 ssh-agent dbus-run-session gpg-agent "
            "runcon pg_virtualenv pdb pdb3 chronic daemonize "
            # Process supervisors and init shims, secret and environment injectors.
            "tini dumb-init catatonit summon corepack "
            # Sandboxes, containers, other architectures and users.
            "fakechroot schroot systemd-nspawn nsjail minijail0 sandbox-exec aa-exec lxc-attach "
            "lxc-execute flatpak-spawn lima wine wine64 box64 box86 run0 "
            "pfexec sshpass xvfb-run dbus-launch "
            # Schedulers, limits and tracers.
            "cgexec numactl cpulimit nocache trickle tsocks torify graftcp "
            "pasuspender optirun primusrun prime-run gamemoderun mangohud steam-run eatmydata "
            "systemd-cat systemd-inhibit run-one run-this-one keep-one-running lockrun retry "
            "nq tsp mpirun mpiexec srun dtach abduco heaptrack multitime pgrphack"),
    **_rows("program", "runs the program named after its first argument",
            "chroot setarch taskset chrt envdir setuidgid s6-setuidgid gosu su-exec envchain "
            "faketime arch-chroot gdbserver setlock envuidgid s6-envdir distrobox-enter", leading=1),
    # The same, where every option that takes an argument is known: the program is certain.
    # GNU tools: a long option may be abbreviated (timeout --kill 1 is --kill-after 1).
    **_rows("program", "runs the program named in its arguments", "env", abbreviates=True,
            code_options=_set("-S --split-string"),
            arg_options=_set("-u --unset -C --chdir -a --argv0")),  # -a: coreutils 9.5
    **_rows("program", "runs the program named in its arguments", "nice", abbreviates=True,
            arg_options=_set("-n --adjustment")),
    **_rows("program", "runs the program named after its first argument", "timeout",
            arg_options=_set("-s --signal -k --kill-after"), leading=1, abbreviates=True),
    **_rows("program", "runs the program named in its arguments", "stdbuf", abbreviates=True,
            arg_options=_set("-i -o -e --input --output --error")),
    # --eof, --replace and --max-lines take a value only glued (--replace=R): the next word
    # is the program (xargs --replace perl -e …).
    **_rows("program", "runs the program named in its arguments, with its input as arguments",
            "xargs", abbreviates=True,
            arg_options=_set("-a -d -E -I -L -n -P -s --arg-file --delimiter --max-args "
                             "--max-procs --max-chars --process-slot-var"),
            flag_options=_set("--eof --replace --max-lines")),
    # Tools that run a program after a subcommand.
    **_rows("subcommand", "runs the program named after its subcommand",
            "pipenv pdm hatch rye", subcommands=_set("run exec tool pip add sync install")),
    # `run` runs the program (or .py file) written after it, with data arguments.
    **_rows("subcommand", "runs the program named after its subcommand", "uv",
            subcommands=_set("run exec tool pip add sync install"), wraps=_set("run"),
            global_options=_set("--directory --project --config-file --cache-dir --color "
                                "--python-preference --allow-insecure-host"),
            global_flags=_set("-q --quiet -v --verbose --offline --no-cache -n --native-tls "
                              "--no-progress --no-config --preview --managed-python "
                              "--no-python-downloads"),
            flag_options=_set("--frozen --locked --no-sync --isolated --no-project --active "
                              "--offline -q --quiet -v --verbose --all-extras --no-dev --exact "
                              "-n --no-cache --no-editable --no-env-file --all-packages")),
    **_rows("subcommand", "runs the program named after its subcommand",
            "poetry pipx conda mamba micromamba",
            subcommands=_set("run exec tool pip add sync install"), wraps=_set("run")),
    **_rows("subcommand", "runs a package or script named after its subcommand",
            "npm", subcommands=_NPM_RUNS, canonical=npm_command,
            data_after_dashes=_set("run test start stop restart"), names_script=_set("run"),
            global_options=_set("--prefix -C --userconfig --globalconfig --cache --registry "
                                "--loglevel -w --workspace --omit --include --script-shell "
                                "--node-options --tag --otp --scope -c --call"),
            global_flags=_set("-g --global -y --yes -s --silent -q --quiet -d -dd -ddd "
                              "--verbose -ws --workspaces --if-present --ignore-scripts "
                              "--offline --prefer-offline --prefer-online --force -f "
                              "--dry-run --json")),
    **_rows("subcommand", "runs a package or script named after its subcommand",
            "pnpm yarn bun", subcommands=_set("exec x dlx run run-script test t tst start stop "
                                              "restart install i in add ci it install-test "
                                              "cit link ln create init rebuild rb update up "
                                              "upgrade dedupe pack publish node config set "
                                              "pkg patch-commit import global")),
    # Secret injectors and version managers: the program follows the subcommand (or --).
    **_rows("subcommand", "runs the program named after its subcommand (with secrets or a "
            "tool version in its environment)",
            "op dotenv dotenvx teller pyenv rbenv nodenv goenv jenv plenv phpenv asdf volta "
            "fnm bundle bundler saml2aws",
            subcommands=_set("run exec env"), wraps=_set("run exec env")),
    **_rows("subcommand", "runs the program named after its subcommand (or the command "
            "given with --command)", "doppler infisical",
            subcommands=_set("run exec"), wraps=_set("run exec"), code_options=_set("--command")),
    **_rows("subcommand", "runs the program named after its subcommand and first argument",
            "aws-vault aws-okta berglas direnv", subcommands=_set("exec allow permit grant"),
            wraps=_set("exec"), leading=1),
    **_rows("subcommand", "runs a command (a shell string, a script or a tool) after its "
            "subcommand", "mise rtx nvm sops chamber pixi",
            subcommands=_set("exec x run r watch exec-env exec-file shell")),
    **_rows("subcommand", "runs a command inside a machine or sandbox after its subcommand",
            "vagrant lxc incus multipass limactl colima minikube machinectl toolbox distrobox "
            "singularity apptainer gcloud az heroku fly flyctl railway",
            subcommands=_set("ssh powershell winrm exec shell console run enter ephemeral "
                             "instance build run-command")),
    **_rows("subcommand", "installs the package named after its subcommand (its scripts run) "
            "or runs an application", "apt apt-get aptitude dnf yum zypper apk brew gem snap "
            "flatpak", subcommands=_set("install reinstall localinstall add upgrade run enter "
                                        "build")),
    **_rows("options", "installs the package file it is given (its scripts run)", "dpkg",
            code_options=_set("-i --install --unpack -x --extract")),
    **_rows("subcommand", "runs a command on another machine after its subcommand", "aws",
            subcommands=_set("execute-command send-command start-session")),
    **_rows("subcommand", "runs code or a development shell after its subcommand", "nix guix",
            subcommands=_set("run shell develop eval repl build profile bundle environment "
                             "time-machine")),
    **_rows("subcommand", "runs code given after its subcommand (runner, console, tinker, shell)",
            "rails manage.py artisan",
            subcommands=_set("runner r console c dbconsole db new app tinker shell dbshell "
                             "shell_plus runscript")),
    **_rows("subcommand", "installs the package named after its subcommand (and runs its "
            "build scripts)", "pip pip3", subcommands=_set("install download wheel")),
    **_rows("subcommand", "runs the program named after its subcommand", "go",
            subcommands=_set("run exec generate test install")),
    **_rows("subcommand", "runs the program named after its subcommand", "cargo",
            subcommands=_set("run exec generate test install"),
            data_after_dashes=_set("run"),
            global_options=_set("-C --config -Z --color --explain"),
            global_flags=_set("-q --quiet -v -vv --verbose --locked --offline --frozen")),
    **_rows("subcommand", "runs the script or code named after its subcommand", "deno",
            subcommands=_set("run eval repl task x test bench compile serve install"),
            wraps=_set("run"),
            flag_options=_set("-A --allow-all --allow-net --allow-read --allow-write "
                              "--allow-env --allow-run --allow-sys --allow-ffi --allow-import "
                              "-q --quiet --no-check --no-prompt --cached-only --no-remote "
                              "--no-npm")),
    **_rows("subcommand", "runs a command inside a container after its subcommand",
            "docker podman nerdctl docker-compose crictl ctr",
            subcommands=_set("run exec create debug attach rsh runp"),
            global_options=_set("--config -c --context -H --host -l --log-level --tlscacert "
                                "--tlscert --tlskey"),
            global_flags=_set("-D --debug --tls --tlsverify")),
    **_rows("subcommand", "runs a command inside a container after its subcommand",
            "kubectl oc k3s microk8s",
            subcommands=_set("run exec create debug attach rsh runp"),
            global_options=_set("-n --namespace --context --cluster --user --kubeconfig -s "
                                "--server --token --as --as-group --as-uid "
                                "--certificate-authority --client-certificate --client-key "
                                "--request-timeout --cache-dir --tls-server-name -v --v "
                                "--profile --profile-output --password --username --log-file "
                                "--log-dir --vmodule"),
            global_flags=_set("--insecure-skip-tls-verify --match-server-version "
                              "--warnings-as-errors --disable-compression")),
    # Shells: the script is code.
    **_rows("shell", "runs its script (the text after -c, or the file) as code",
            "sh bash dash zsh ksh ksh93 mksh pdksh ash yash posh rbash fish csh tcsh rc es oksh "
            "loksh hush osh oil", arg_options=_SHELL_ARG_OPTIONS),
    # Interpreters: the program text is code.
    **_rows("text", "runs its program text as code (sed's e, awk's system())", "sed",
            code_options=_set("-e --expression -f --file"),
            arg_options=_set("-l --line-length"), abbreviates=True),
    # gawk -W NAME is --NAME (-W source 'prog', -Wsou='prog'); mawk's -W takes a word too.
    **_rows("text", "runs its program text as code (awk's system())", "awk gawk",
            code_options=_set("-f --file -e --source"),
            arg_options=_set("-F -v --field-separator --assign -i --include -l --load -W"),
            variable_options=_set("-v --assign"), abbreviates=True, long_letter="W"),
    **_rows("text", "runs its program text as code (awk's system())", "mawk nawk",
            code_options=_set("-f"), arg_options=_set("-F -v -W"), variable_options=_set("-v")),
    **_rows("text", "runs the text after -e as code (and reads options after it; -n and -p "
            "open a file name ending in | as a command)", "perl", code_options=_set("-e -E"),
            arg_options=_set("-I -M -m")),
    **_rows("text", "runs the text after -e as code", "ruby", code_options=_set("-e"),
            arg_options=_set("-I -r")),
    **_rows("text", "runs the text after -e or -p as code (and reads options after it)",
            "node nodejs", code_options=_set("-e --eval -p --print --run"),
            arg_options=_NODE_ARG_OPTIONS, runs_all=_set("--test")),
    **_rows("text", "runs the text after -r as code", "php", code_options=_set("-r"),
            arg_options=_set("-d -c")),
    **_rows("text", "runs the text after -e as code (and the next word as a script)",
            "lua luajit", code_options=_set("-e"), arg_options=_set("-l"), after_code="script"),
    **_rows("text", "runs the text after -c (or the module after -m, as that module does) "
            "as code", "python", code_options=_set("-c -m"),
            arg_options=_set("-W -X --check-hash-based-pycs"),
            after_code="data", module_options=_set("-m")),
    **_rows("text", "runs the text after -e as code", "Rscript", code_options=_set("-e")),
    **_rows("text", "runs its first argument (or the text after -e) as a Perl expression",
            "rename prename file-rename", code_options=_set("-e -E"),
            arg_options=_set("-d --path --fullpath -m -u --unicode")),
    **_rows("text", "runs the class or jar it names as code (after -jar, -m or its options)",
            "java", code_options=_set("-jar -m --module"), clusters=False,
            arg_options=_set("-cp -classpath --class-path -p --module-path --add-modules "
                             "--add-opens --add-exports --add-reads --limit-modules"),
            after_code="data"),
    **_rows("text", "runs the text after -e as code (and reads options after it)",
            "ts-node tsx groovy elixir", code_options=_set("-e --eval -p --print"),
            arg_options=_set("-r --require")),
    # Options of these run a program: a value must not be able to become an option.
    **_rows("options", "has options that run a program (-c core.pager=…, --upload-pack=…, "
            "grep -O…)", "git",
            code_options=_set("-c --config-env --exec-path --upload-pack -u --receive-pack "
                              "--exec -x --extcmd -O --open-files-in-pager --config "
                              "--template -C --git-dir --work-tree"),
            arg_options=_set("-C -c --git-dir --work-tree --namespace --config-env "
                             "--attr-source --super-prefix"),
            global_flags=_set("-p --paginate -P --no-pager --no-replace-objects --bare "
                              "--literal-pathspecs --glob-pathspecs --noglob-pathspecs "
                              "--icase-pathspecs --no-optional-locks --no-advice "
                              "--no-lazy-fetch"),
            value_options=_set("--author --committer --since --until --after --before "
                               "--grep commit:-m commit:--message merge:-m merge:--message "
                               "stash:-m stash:--message tag:-m tag:--message "
                               "archive:-o archive:--output"),
            data_subcommands=_set("checkout switch status rev-parse describe show-ref branch"),
            runs_after=_set("foreach run")),
    **_rows("options", "has options that run a program (--to-command=…, "
            "--use-compress-program=…, --checkpoint-action=exec=…)", "tar",
            code_options=_set("-I --use-compress-program --to-command --checkpoint-action "
                              "--info-script -F --new-volume-script --rsh-command"),
            value_options=_set("-f --file -C --directory")),
    **_rows("options", "has options that run a program (-e, --rsh=…, --rsync-path=…)",
            "rsync scp sftp", code_options=_set("-e --rsh --rsync-path -S -o -F")),
    **_rows("options", "has options that run a program (-e use_askpass=…, --use-askpass=…, "
            "--config=…)", "wget",
            code_options=_set("-e --execute --use-askpass --config"),
            value_options=_set("-O --output-document -o --output-file -a --append-output "
                               "-P --directory-prefix -U --user-agent --header --referer "
                               "--user --password --http-user --http-password")),
    **_rows("options", "has options that run a program (--compress-program=…)", "sort",
            code_options=_set("--compress-program")),
    **_rows("options", "has options that run a program (-TT, --unzip-command)", "zip",
            code_options=_set("-TT --unzip-command")),
    **_rows("options", "has an option that runs a program (--filter=…)", "split",
            code_options=_set("--filter")),
    **_rows("options", "has options that run a program (--pre=…, -x/--exec=…)",
            "rg fd fdfind", code_options=_set("--pre -x --exec -X --exec-batch")),
    **_rows("options", "has options that run a program (--diff-program=…)", "sdiff diff3",
            code_options=_set("--diff-program")),
    **_rows("options", "has options that run a program (--config hooks.…=…)", "hg",
            code_options=_set("--config")),
    **_rows("options", "has options that run a program (--renderer-cmd-prefix=…, "
            "--gpu-launcher=…)", "chromium chromium-browser google-chrome google-chrome-stable "
            "chrome microsoft-edge brave-browser",
            code_options=_set("--renderer-cmd-prefix --utility-cmd-prefix --gpu-launcher "
                              "--browser-subprocess-path --ppapi-plugin-launcher")),
}

#: Other names of programs in the table (versions, Debian's alternatives), by pattern.
_ALIASES = [(re.compile(p), name) for p, name in [
    (r"python[0-9.]*|pypy[0-9.]*", "python"), (r"perl[0-9.]*(?:-[\w.-]+)?", "perl"),
    (r"(?:tclsh|wish)[0-9.]*", "tclsh"), (r"vim?\.[\w-]+", "vim"), (r"php[0-9.]*", "php"),
    (r"lua[0-9.]*", "lua"), (r"ruby[0-9.]*", "ruby"), (r"node[0-9]*", "node"),
    (r"ld(?:-linux[\w.-]*)?\.so(?:\.[0-9]+)*", "x86_64"), (r"gawk[0-9.-]*", "gawk"),
    (r"qemu-[\w.-]+", "x86_64"), (r"java[0-9.]*", "java"),
    (r"pydoc[0-9.]*", "pydoc"), (r"(?:pytest|py\.test)(?:-?[0-9.]+)?", "pytest"),
    # Homebrew's names of the GNU tools on macOS (coreutils, findutils, gnu-sed, gnu-tar).
    *((f"g{name}", name) for name in ("timeout", "env", "xargs", "nice", "nohup", "stdbuf",
                                      "chroot", "time", "sed", "tar", "sort", "split")),
]]
#: Names of find, whose ``-exec`` runs the program written after it.
FIND_NAMES = frozenset({"find", "gfind"})  # Homebrew findutils
# Files a program reads its standard input through (``bash /dev/stdin``), normalised.
_STDIN_PATH = re.compile(r"(?:^|/)dev/stdin|/fd/0")
#: Python modules that run code, a script or a module their arguments (or standard input)
#: name: ``python3 -m timeit {x}`` runs the value. A module named like a program of the
#: table is judged as that program (``python3 -m pip install {x}``); any other module
#: reads its arguments as data, as a program missing from the table does
#: (``python3 -m http.server {port}``, ``-m json.tool {file}``, ``-m venv {dir}``).
CODE_MODULES = frozenset("""
code codeop asyncio pdb ipdb pudb debugpy IPython ptpython bpython idlelib idle pydoc inspect
pickle cProfile profile trace runpy timeit unittest doctest pytest nose nose2 coverage memray
scalene pyinstrument line_profiler kernprof jupyter ipykernel nbconvert papermill build
uvicorn gunicorn hypercorn flask celery streamlit django invoke fabric nox tox locust scrapy
test behave green trial twisted daphne waitress dramatiq rq huey sphinx xdist pytest_xdist
""".split())


def reads_stdin(path: str) -> bool:
    """Whether the file ``path`` names is standard input, however it is spelled
    (``-``, ``/dev/stdin``, ``//dev/./stdin``, ``/proc/thread-self/fd/0``…).

    >>> reads_stdin("/dev//./stdin"), reads_stdin("data.csv")
    (True, False)
    """
    import posixpath

    return path == "-" or _STDIN_PATH.search(posixpath.normpath(path)) is not None


def canonical_name(name: str) -> str:
    """The table's name for a command name (its last path part): the same, or the name
    an alias stands for (``gtimeout`` → ``timeout``, ``python3.12`` → ``python``).

    >>> canonical_name("/opt/homebrew/bin/gsed"), canonical_name("grep")
    ('sed', 'grep')
    """
    base = name.rsplit("/", 1)[-1]
    if base in PROGRAMS:
        return base
    return next((name for pattern, name in _ALIASES if pattern.fullmatch(base)), base)


def program_of(name: str) -> Program | None:
    """The table's row for a command name (its last path part), or ``None``.

    >>> program_of("/usr/bin/env").runs
    'program'
    >>> program_of("grep") is None
    True
    """
    return PROGRAMS.get(canonical_name(name))
