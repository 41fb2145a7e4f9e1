"""One row of the program table (:mod:`brain.shell_check.programs`): what a program does
with its arguments that a placeholder must not reach, by kind (see that module).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Runs = Literal["code", "names", "program", "subcommand", "shell", "text", "options"]


@dataclass(frozen=True, slots=True)
class Program:
    """What one program does with its arguments that a placeholder must not reach."""

    runs: Runs
    #: Why, in a few words, for messages and the docs.
    why: str
    #: ``text``: the options whose argument is program text; ``options``: those whose
    #: argument is a program or sets one.
    code_options: frozenset[str] = frozenset()
    #: ``text``/``shell``/``program``: options that take an argument (skipped over).
    arg_options: frozenset[str] = frozenset()
    #: ``program``: fixed words between the options and the program (``setarch ARCH``).
    leading: int = 0
    #: ``subcommand``: the subcommands that run a program (or, for ``docker``, a command).
    subcommands: frozenset[str] = frozenset()
    #: ``options``: options whose value may be a placeholder (``git commit -m {x}``).
    value_options: frozenset[str] = frozenset()
    #: ``code``/``text``: options whose argument may hold a placeholder after a literal
    #: ``NAME=`` (``awk -v n={x}``, ``psql -v id={x}``): a variable the program sets, data.
    variable_options: frozenset[str] = frozenset()
    #: ``options``: subcommands none of whose options runs a program (``git checkout``).
    data_subcommands: frozenset[str] = frozenset()
    #: ``options``: words after which the rest is a command it runs (``git submodule
    #: foreach``, ``git bisect run``).
    runs_after: frozenset[str] = frozenset()
    #: ``text``: what follows program text given through a code option: ``data`` (python
    #: stops reading options), ``options`` (perl, node, gawk read on: a value must follow
    #: ``--``) or ``script`` (lua takes the next word as a script: no value at all).
    after_code: Literal["data", "options", "script"] = "options"
    #: ``subcommand``: subcommands after which comes a program and its arguments,
    #: checked as for a ``program`` row (``uv run script.py {x}``); ``leading`` fixed
    #: words first (``aws-vault exec PROFILE``).
    wraps: frozenset[str] = frozenset()
    #: ``subcommand``: subcommands after whose ``--`` the words are data for a script the
    #: tool quotes them for (``npm run build -- {x}``).
    data_after_dashes: frozenset[str] = frozenset()
    #: ``subcommand``: those of ``data_after_dashes`` that name the script first
    #: (``npm run build``), which must be written out.
    names_script: frozenset[str] = frozenset()
    #: ``program`` rows (or wrapping subcommands) that do not list every option taking an
    #: argument: options known to take none, so the next word may be the program.
    flag_options: frozenset[str] = frozenset()
    #: ``subcommand``/``options``: options before the subcommand that take an argument
    #: (``npm --prefix DIR``), and those that take none (``npm -g``): where the subcommand
    #: stands. Another option may take one or not (both readings are judged).
    global_options: frozenset[str] = frozenset()
    global_flags: frozenset[str] = frozenset()
    #: ``subcommand``: the subcommand a written word names (npm's aliases and
    #: abbreviations: ``npm isntall``, ``npm rum``), ``None`` for no subcommand.
    canonical: Callable[[str], str | None] | None = None
    #: ``text``: options naming a module run as the program (``python -m MODULE``),
    #: judged as that module: see :data:`CODE_MODULES`.
    module_options: frozenset[str] = frozenset()
    #: ``text``: whether short options cluster (``perl -le``, ``python3 -Im``); not for
    #: ``java``, whose single-dash options are long (``-Xmx512m``).
    clusters: bool = True
    #: Whether the program's option parser (GNU ``getopt_long``) takes a long option
    #: abbreviated to any unique prefix (``env --ch DIR`` is ``--chdir DIR``): see
    #: :meth:`long_option`. Not for every row: node's ``--inspect`` is a flag of its own,
    #: not an abbreviation of ``--inspect-port``.
    abbreviates: bool = False
    #: ``text``: the short option whose argument names a long option (gawk's ``-W source``,
    #: ``-Wsource=…`` are ``--source``, ``--source=…``): see :meth:`long_named`.
    long_letter: str = ""
    #: ``text``: flags after which every argument is a file it runs as code (``node
    #: --test a.js {x}`` runs each file as a test): no placeholder at all with one.
    runs_all: frozenset[str] = frozenset()

    def long_option(self, word: str) -> str:
        """The option long option word ``word`` names, with its glued value: for a row that
        :attr:`abbreviates`, a prefix of its known options stands for them (``--ch`` →
        ``--chdir``, ``--sou=…`` → ``--source=…``). A prefix of several is read as the one
        that does the most (a code option, else one taking an argument): the program
        refuses an ambiguous prefix or takes it as one of them, so the check refuses
        rather than accepts. ``word`` itself otherwise, and when it is an option exactly.

        >>> from brain.shell_check.programs import PROGRAMS
        >>> PROGRAMS["env"].long_option("--ch"), PROGRAMS["gawk"].long_option("--sou=x")
        ('--chdir', '--source=x')
        """
        name, eq, value = word.partition("=")
        if not self.abbreviates or not name.startswith("--") or len(name) < 3:
            return word
        known = self.code_options | self.arg_options | self.flag_options
        if name in known:
            return word
        candidates = sorted(o for o in known if o.startswith(name))
        pick = next((o for o in candidates if o in self.code_options), None) \
            or next((o for o in candidates if o in self.arg_options), None)
        return word if pick is None else pick + eq + value

    def long_named(self, word: str) -> str | None:
        """The long option the row's :attr:`long_letter` makes of ``word``, alone or last
        in a cluster of short options: ``--NAME`` (resolved as by :meth:`long_option`) for
        ``-WNAME`` and ``-bWNAME=VALUE``; ``""`` for ``-W`` and ``-bW``, whose next word
        is NAME; ``None`` for any other word.

        >>> from brain.shell_check.programs import PROGRAMS
        >>> [PROGRAMS["gawk"].long_named(w) for w in ("-Wsou", "-bW", "-b", "-vW")]
        ['--source', '', None, None]
        """
        if not self.long_letter or not self.clusters \
                or not re.fullmatch(r"-[A-Za-z]\S*", word):
            return None
        takes = {o[1] for o in self.code_options | self.arg_options if len(o) == 2}
        for i, letter in enumerate(word[1:], start=2):
            if letter == self.long_letter:
                return self.long_option("--" + word[i:]) if i < len(word) else ""
            if letter in takes or not letter.isalpha():
                return None
        return None

    def options_taking_next(self, word: str) -> tuple[str, ...]:
        """The options of option word ``word`` that take the words after it as their
        arguments, one word each, in order: ``("-o",)`` for ``-o`` (one of ``arg_options``)
        and for a cluster of short options whose last letter takes one (``bash -eo
        pipefail``, ``timeout -vk 1``, ``env -iC DIR``, ``xargs -rn 1``, ``python3 -bX
        dev``); none when that letter stands in the middle, where it takes the rest of the
        word (``-n1``, ``-Xdev``). A shell instead gives each such letter of a cluster the
        next word in turn (``bash -oe pipefail``: ``-o pipefail -e``). A long option may be
        abbreviated where the row says so (``timeout --kill 1``: :meth:`long_option`)."""
        word = self.long_option(word)
        if word in self.arg_options:
            return (word,)
        if not self.clusters or not re.fullmatch(r"[-+][A-Za-z][^=]*", word) \
                or word.startswith(("--", "++")):
            return ()
        sign = word[0]
        takes = {o[1] for o in self.arg_options if len(o) == 2 and o[0] == sign}
        if self.runs == "shell":
            return tuple(f"{sign}{letter}" for letter in word[1:] if letter in takes)
        for i, letter in enumerate(word[1:], start=2):
            if letter in takes:
                return (f"{sign}{letter}",) if i == len(word) else ()
        return ()

