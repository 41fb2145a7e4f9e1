"""What a command does with its arguments and its standard input, program by program
(the table in :mod:`brain.shell_check.programs`): where a placeholder among a command's
words, or fed to its input, would be code or the program to run.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from brain.shell_check.program_text import _ProgramText
from brain.shell_check.programs import FIND_NAMES, Program, canonical_name, program_of
from brain.shell_check.step_input import _StepInput
from brain.shell_check.subcommands import _Subcommands, subcommand_of
from brain.shell_check.syntax import (
    _command_words,
    _literal,
    _Refused,
    _single,
    _text,
    _walk,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Iterator

    from tree_sitter import Node

# Wrappers with no option that takes an argument: the first plain word is the program.
_PLAIN_WRAPPERS = {"command", "builtin", "nohup", "setsid", "coproc", "time"}

_TEST_UNARY = {"!", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-L", "-n", "-N", "-O",
               "-G", "-p", "-r", "-s", "-S", "-t", "-u", "-w", "-x", "-z", "-a", "-o"}

_TEST_BINARY = {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot",
                "-ef", "-a", "-o"}

# `NAME=` written literally (a quote may open first): a variable a program sets.
_NAME_IS = re.compile(r"""["']?[A-Za-z_][A-Za-z0-9_]*=""")


# git config keys whose value is data (a name, an address, a branch name).
_GIT_DATA_KEYS = frozenset({"user.name", "user.email", "init.defaultbranch"})


class _Arguments(_Subcommands, _ProgramText, _StepInput):
    """The checks of a command's words and input, for one placeholder's marker (a word
    holding ``prefix`` is hostile: it holds a value)."""

    prefix: str
    #: The template's functions, by name (see :meth:`check_template_readers`).
    functions: dict[str, Node]

    def hostile(self, node: Node) -> bool:
        return self.prefix.encode() in (node.text or b"")

    def check_command(self, cmd: Node) -> None:
        name_node = cmd.child_by_field_name("name")
        name = _literal(name_node) if name_node is not None else None
        if name is None or self.prefix in name:
            raise _Refused("an argument of a command whose name is not written literally, so "
                           "the check cannot tell what would run",
                           "write the program name literally, or use argv=")
        self.check_args(name, _command_words(cmd))

    def check_args(self, name: str, words: list[Node]) -> None:
        base = name.rsplit("/", 1)[-1]
        row = program_of(base)
        if base == "printf":
            self.check_printf(words)
        elif base in ("test", "["):
            if base == "[" and words and _literal(words[-1]) == "]":
                words = words[:-1]
            self.check_test(base, words)
        elif base in FIND_NAMES:
            self.check_find(words)
        elif row is None:
            return
        elif row.runs == "code" and row.variable_options and self.only_variables(row, words):
            return  # psql -v id={x}: a variable it sets, data until SQL reads it (:'id')
        elif row.runs == "code":
            raise _Refused(f"an argument of {base}, which {row.why}",
                           "pass the value through env= (and use \"$VAR\") or stdin=")
        elif row.runs == "names":
            raise _Refused(f"an argument of {base}, which {row.why}")
        elif row.runs == "shell":
            self.check_shell(base, row, words)
        elif row.runs == "program":
            self.check_wrapper(base, row, words)
        elif row.runs == "subcommand":
            self.check_subcommand(base, row, words)
        elif row.runs == "text":
            self.check_program_text(base, row, words)
        else:
            self.check_options(base, row, words)

    def variable_value(self, word: Node) -> bool:
        """Whether ``word`` is ``NAME=`` written literally, then text holding the value."""
        return _NAME_IS.match(_text(word)) is not None \
            and not _text(word).startswith(self.prefix)

    def only_variables(self, row: Program, words: list[Node]) -> bool:
        """Whether every placeholder among ``words`` is the ``NAME=value`` argument of one of
        the row's variable options (``psql -v id={x}``, ``--set=id={x}``)."""
        for i, word in enumerate(words):
            if not self.hostile(word):
                continue
            before = _literal(words[i - 1]) if i else None
            text = _text(word)
            attached = next((o for o in row.variable_options if text.startswith(o + "=")), None)
            if attached is not None:
                text = text[len(attached) + 1:]
            elif before not in row.variable_options:
                return False
            if _NAME_IS.match(text) is None:
                return False
        return True

    def check_input_of(self, cmd: Node | None, how: str) -> None:
        """``sh < {x}``, ``sh <<< {x}``, ``. /dev/stdin <<< {x}``: what the command reads
        from standard input must not be its program."""
        name_node = cmd.child_by_field_name("name") if cmd is not None else None
        name = _literal(name_node) if name_node is not None else None
        if cmd is None or name is None or self.prefix in name:
            raise self.stdin_refusal(how, "a command the check cannot name")
        self.check_reader(name.rsplit("/", 1)[-1], _command_words(cmd), how)

    def check_piped_into(self, element: Node, depth: int = 0) -> None:
        """What a later command of a pipeline (or a ``>(…)``) reads from standard input must
        not be its program (``echo {x} | sh``, ``printf %s {x} | sqlite3``), nor a command
        the check cannot name (``| "$0"``); a function of the template is looked into."""
        for node in _walk(element):
            name_node = node.child_by_field_name("name") if node.type == "command" else None
            if name_node is None:
                continue
            name = _literal(name_node)
            if name is None:
                raise self.stdin_refusal("in a pipeline", "a command the check cannot name")
            body = self.functions.get(name)
            if body is not None and depth < 8:
                self.check_piped_into(body, depth + 1)
                continue
            base = name.rsplit("/", 1)[-1]
            row = program_of(base)
            if base in FIND_NAMES or (row is not None and row.runs not in ("names", "options")):
                self.check_reader(base, _command_words(node), "in a pipeline")

    def check_template_readers(self, root: Node) -> None:
        """Template-wide, since a value reaches a pipe or a function however it is written
        there: every later command of every pipeline, and every ``>(…)``, must read its
        input as data."""
        self.functions = {}
        for node in _walk(root):
            if node.type == "function_definition":
                fname = node.child_by_field_name("name")
                fbody = node.child_by_field_name("body")
                if fname is not None and fbody is not None:
                    self.functions[_text(fname)] = fbody
        for node in _walk(root):
            if node.type == "pipeline":
                for later in node.named_children[1:]:
                    self.check_piped_into(later)
            elif node.type == "process_substitution" and _text(node).startswith(">("):
                self.check_piped_into(node)

    def stdin_refusal(self, how: str, who: str) -> _Refused:
        return _Refused(f"{how} that {who} reads from standard input, where it may take it as "
                        f"its program", "feed it to a program that reads data (cat, grep …), "
                        "or pass the value through env= to a script file that reads it")

    def check_reader(self, base: str, words: list[Node], how: str) -> None:
        """Refuse unless program ``base`` with argument ``words`` reads its standard input
        as data."""
        row = program_of(base)
        if row is None or row.runs == "options":
            return
        if row.runs == "program":
            # Each word that may be the program it runs must read its input as data; xargs
            # makes its input the program's arguments, so that program must take any.
            for program, rest, certain in self.wrapped_candidates(base, row, words):
                if canonical_name(base) == "xargs" and (program_of(program) is not None
                                        or program.rsplit("/", 1)[-1] in FIND_NAMES):
                    why = getattr(program_of(program), "why", "runs what -exec names")
                    raise _Refused(f"{how} that xargs turns into arguments of {program}, which "
                                   f"{why}")
                if canonical_name(base) != "xargs":
                    self.check_reader(program.rsplit("/", 1)[-1], rest, how)
                if certain:
                    return
            raise self.stdin_refusal(how, base)
        if row.runs == "names" and not how.startswith("the name"):
            raise _Refused(f"a here-string read by {base}, which assigns it to a variable "
                           f"(like NAME={{x}})")
        found = self.running_at(row, words) if row.runs == "subcommand" else None
        if row.runs == "subcommand" and found is None:
            return  # docker login --password-stdin: a subcommand that reads data
        sure = self.certain_running(row, words) if found is not None else None
        if sure is not None and sure[1] in row.wraps:
            # echo {x} | uv run script.py: what the program written out does with its input
            index, running = sure
            rest = words[index + 1:]
            for program, after, certain in self.wrapped_candidates(base, row, rest):
                self.check_reader(program.rsplit("/", 1)[-1], after, how)
                if certain:
                    return
            raise self.stdin_refusal(how, f"{base} {running}")
        if row.runs in ("code", "names", "program", "subcommand") or \
                not self.has_program_text(base, row, words):
            raise self.stdin_refusal(how, base)
        if row.runs == "shell":
            self.check_shell_script(base, row, words, how)  # sh -c 'cat | sh' <<< {x}

    def wrapped_candidates(self, name: str, row: Program,
                           words: list[Node]) -> Iterator[tuple[str, list[Node], bool]]:
        """The words a wrapper may run as its program, with their arguments, and whether
        each is certainly the program (it is not right after an option that may take it).
        Stops at a word that is not literal. Where the row lists the options that take an
        argument (``nice -n 5``), the program is always certain; so it is after ``--``,
        which ends every wrapper's options (``tini -s -- PROGRAM``), and after a long option
        glued to its value (``--python=3.12``) or one the row knows takes none."""
        precise = bool(row.arg_options)
        after_option = ended = False
        skip = 0
        leading = row.leading
        for i, word in enumerate(words):
            lit = _literal(word)
            if lit is None or self.hostile(word):
                return
            if skip:  # an argument of the option before (timeout -vk 1)
                skip -= 1
                continue
            if canonical_name(name) == "env" and "=" in lit and not lit.startswith("-"):
                continue  # env NAME=value: a variable, even after --
            if not ended:
                if _is_code_option(lit, row):
                    return  # env -S 'sh -c': a command line of its own
                if lit == "--" and after_option:
                    after_option = False  # sudo -u -- -s {x}: maybe -u's argument
                    continue
                if lit == "--":
                    ended = True
                    continue
                if lit.startswith("-"):
                    glued = lit.startswith("--") and "=" in lit
                    after_option = not (precise or glued or lit in row.flag_options)
                    skip = len(row.options_taking_next(lit)) if precise else 0
                    continue
            if leading > 0 and not after_option:
                leading -= 1
                continue
            certain = ended or not after_option or canonical_name(name) in _PLAIN_WRAPPERS
            yield lit, words[i + 1:], certain
            if certain:
                return
            after_option = False

    def check_find(self, words: list[Node]) -> None:
        """``find ... -exec PROGRAM ARGS ;``: the program is written out, and checked; and no
        value may split into several words (``-name $(…)``), which could add an ``-exec``."""
        for word in words:
            if self.hostile(word) and not _single(word):
                raise _Refused("unquoted $(…) output among find's arguments, where it could split "
                               "into several (-exec …)", 'write it in double quotes: "$(…)"')
        for i, word in enumerate(words):
            if _literal(word) in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(words):
                program = words[i + 1]
                prog = _literal(program)
                if self.hostile(program) or prog is None:
                    raise _Refused("the program find -exec runs", "write the program literally")
                end = next((j for j in range(i + 2, len(words))
                            if _literal(words[j]) in (";", "+", "\\;")), len(words))
                self.check_args(prog, words[i + 2:end])

    def check_printf(self, words: list[Node]) -> None:
        """``printf [-v NAME] [--] FORMAT ARGS``: options and format must be written out."""
        i = 0
        while i < len(words):
            word = words[i]
            if self.hostile(word) or not _single(word):
                raise _Refused("printf's format or options (a value -v would make bash "
                               "evaluate the next word as a variable name)",
                               "write the format literally first: printf '%s\\n' {x}")
            lit = _literal(word)
            if lit == "-v":
                if i + 1 < len(words) and (self.hostile(words[i + 1])
                                           or not _single(words[i + 1])):
                    raise _Refused("the variable name of printf -v, which bash evaluates "
                                   "(a[$(…)] runs)")
                i += 2
            elif lit == "--":
                i += 1
            else:
                return
        raise _Refused("printf's format or options")  # pragma: no cover - marker is a word

    def check_test(self, name: str, words: list[Node]) -> None:
        """``test``/``[`` with at most three words whose roles cannot change."""
        hostile = {i for i, w in enumerate(words) if self.hostile(w)}
        single = all(_single(w) for w in words)
        n = len(words)
        lits = [_literal(w) for w in words]
        if single and (
                n == 1
                or (n == 2 and hostile == {1} and lits[0] in _TEST_UNARY)
                or (n == 3 and 1 not in hostile and lits[1] in _TEST_BINARY)):
            return
        raise _Refused(f"an operand of {name} where a value like -v could become an "
                       f"operator (bash's -v evaluates a[$(…)])",
                       "use the forms [ -n {x} ] or [ {x} = word ], or pass the value "
                       "through env=")

    def check_wrapper(self, name: str, row: Program, words: list[Node]) -> None:
        """``env``/``timeout 5``/``setarch x86_64``…: the program they run must be written
        out first, after the options and the row's fixed words; it is checked in turn (each
        word an option may take as its argument is checked as a program too)."""
        for program, rest, certain in self.wrapped_candidates(name, row, words):
            self.check_args(program, rest)
            if certain:
                return
        raise _Refused(f"an argument of {name}, which {row.why} (it may take the value as the "
                       f"program to run, or as one of its options)",
                       f"write the program after {name} literally and the placeholder after it")

    def check_git_config(self, words: list[Node]) -> None:
        """``git config KEY {x}``: only keys that are data take a placeholder; others may
        name a program git runs later (``core.fsmonitor`` on ``git status``,
        ``core.sshCommand``, ``alias.*``, ``credential.helper``)."""
        key = _git_config_key(words)
        if key is None or key.lower() not in _GIT_DATA_KEYS:  # a marker is no data key
            raise _Refused("a value of git config, whose key may name a program git runs "
                           "later (core.fsmonitor, core.sshCommand, alias.*)",
                           "set only " + ", ".join(sorted(_GIT_DATA_KEYS)) + " from a "
                           "placeholder, or pass the value through env= (GIT_AUTHOR_NAME …)")

    def check_options(self, name: str, row: Program, words: list[Node]) -> None:
        """``git``/``tar``/``rsync``…: a value that starts a word could start with ``-`` and
        become one of the options that run a program; it must follow ``--`` (or an option
        that takes it as its value, ``git commit -m {x}``)."""
        previous: str | None = None
        first = subcommand_of(row, words)
        if name == "git" and any(map(self.hostile, words)) and (first == "config" or (
                first is None and any(_literal(w) == "config" for w in words))):
            self.check_git_config(words)
        # The words options take as their arguments: never options, nor the end of them
        # (git -C -- {x}, tar -cf -- {x}, wget -O -- {x} read {x} as an option).
        values = _option_values(name, row, first, words)
        for i, word in enumerate(words):
            lit = _literal(word)
            if lit in row.runs_after:
                raise _Refused(f"after {name} … {lit}, which runs the rest as a command",
                               "pass the value through env= (and use \"$VAR\")")
            if lit in ("--", "--end-of-options") and i not in values:
                if any(_literal(w) in row.runs_after for w in words):
                    continue
                return
            text = _text(word).lstrip("'\"\\")
            if self.hostile(word) and first in row.data_subcommands \
                    and previous not in row.code_options and not text.startswith("-"):
                previous = lit
                continue  # git checkout {x}: no option of it runs a program
            if self.hostile(word):
                if text.startswith("-"):  # --option={x}: only an option taking plain data
                    risky = text.split("=", 1)[0] not in row.value_options
                else:  # {x}, "{x}", $(…{x}…): the value could start with -
                    risky = text.startswith((self.prefix, "$")) and not (i in values and (
                        previous in row.value_options
                        or f"{first}:{previous}" in row.value_options
                        or (canonical_name(name) == "tar"
                            and _tar_bundle_takes(previous) in ("f", "C"))))
                if previous in row.code_options:
                    raise _Refused(f"the argument of {name} {previous}, which it runs (or "
                                   f"which sets what it runs)",
                                   "write it literally, or pass the value through env=")
                if risky:
                    raise _Refused(f"an argument of {name} where an option could stand, and "
                                   f"{name} {row.why}",
                                   f"write -- before it ({name} … -- {{x}}"
                                   + (", or --end-of-options before a revision" if name == "git"
                                      else "") + "), or glue it to a literal prefix (./{x})")
            previous = lit


def _git_config_key(words: list[Node]) -> str | None:
    """The key ``git … config [options] KEY …`` sets: the first literal word after
    ``config`` that is not an option (an option's argument, ``--file F``, reads as the key
    and is not one of the data keys, so it is refused too)."""
    after = False
    for word in words:
        lit = _literal(word)
        if after and lit is not None and not lit.startswith("-"):
            return lit
        after = after or lit == "config"
    return None

_TAR_ARG_LETTERS = "bCfFgHIKLNTVX"


def _tar_bundle_takes(word: str | None) -> str | None:
    """Which option of a tar option bundle (``czf``, ``-cIf``) takes the next word: the
    first of its letters that takes an argument; ``None`` when none does. In a bundle
    with a dash that letter takes the rest of the word when any follows (``-fC``: the
    archive ``C``), so only a last letter takes the next word."""
    if word is None or word.startswith("--") or not re.fullmatch(r"-?[A-Za-z]+", word):
        return None
    letter = next((c for c in word.lstrip("-") if c in _TAR_ARG_LETTERS), None)
    if letter is not None and word.startswith("-") and not word.endswith(letter):
        return None
    return letter


def _option_values(name: str, row: Program, first: str | None,
                   words: list[Node]) -> set[int]:
    """The indices of ``words`` that an option of an ``options`` row takes as its argument
    (``git -C DIR``, ``tar -cf ARCHIVE``, ``wget -qO FILE``, tar's first word ``cfC A D``),
    up to the ``--`` that ends the options. Such a word is neither an option nor the end
    of the options, even when it is ``--`` (getopt gives it to the option). An option
    takes one where the row lists it in any of its option sets (code options too: a
    row's short code option that takes none only makes the check stricter), also last in
    a cluster of short options, or abbreviated (``--namesp``: getopt_long, git's
    parse-options)."""
    takes = {o.split(":", 1)[-1] for o in row.value_options
             if ":" not in o or first is None or o.startswith(f"{first}:")}
    takes |= row.arg_options | row.code_options | row.global_options
    longs = {o for o in takes if o.startswith("--")}
    shorts = {o[1] for o in takes if len(o) == 2 and o[0] == "-"}
    tar = canonical_name(name) == "tar"
    values: set[int] = set()
    i = 0
    while i < len(words):
        lit = _literal(words[i])
        n = 0
        if lit is None:
            pass
        elif lit in ("--", "--end-of-options"):
            break
        elif lit in takes:  # also one dash, several letters (zip -TT CMD)
            n = 1
        elif tar and i == 0 and re.fullmatch(r"[A-Za-z]+", lit):
            n = sum(c in _TAR_ARG_LETTERS for c in lit)  # tar cfC ARCHIVE DIR
        elif tar and _tar_bundle_takes(lit) is not None and lit.startswith("-"):
            n = 1
        elif lit.startswith("--"):
            n = int("=" not in lit and (lit in longs or (
                lit not in row.global_flags and len(lit) > 2
                and any(o.startswith(lit) for o in longs))))
        elif lit.startswith("-") and len(lit) > 1:
            letter = next((j for j, c in enumerate(lit[1:], 1) if c in shorts), None)
            n = int(letter == len(lit) - 1)
        values.update(range(i + 1, min(i + 1 + n, len(words))))
        i += 1 + n
    return values

def _is_code_option(word: str, row: Program) -> bool:
    """Whether ``word`` is one of the row's code options, also glued to its value, in a
    cluster of short options or abbreviated (``-S'sh -c'``, ``-iS``, ``--split-string=…``,
    ``--sp``)."""
    if row.long_option(word).split("=", 1)[0] in row.code_options:  # --sp: --split-string
        return True
    if word.startswith("-") and not word.startswith("--"):
        shorts = {o[1] for o in row.code_options if len(o) == 2}
        return any(letter in shorts for letter in word[1:])
    return False
