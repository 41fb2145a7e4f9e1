"""What shells and interpreters do with their words: the script or program text is code
(``sh -c``, ``sed``, ``awk``, ``perl -e``, ``python -c``/``-m``), data may come only after
it (the ``shell`` and ``text`` rows of :mod:`brain.shell_check.programs`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from brain.shell_check.programs import (
    CODE_MODULES,
    PROGRAMS,
    Program,
    canonical_name,
    program_of,
    reads_stdin,
)
from brain.shell_check.syntax import _literal, _Refused

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable

    from tree_sitter import Node

# perl code that reads the files named by its arguments through the two-argument open of
# the ARGV loop, which runs a name ending in "|" as a command: <>, <ARGV>, readline(ARGV),
# eof() (it opens the next file). <<>> and <STDIN> do not.
_PERL_ARGV_LOOP = re.compile(r"(?<!<)<\s*(?:ARGV)?\s*>(?!>)|\breadline\s*\(?\s*\*?ARGV\b"
                             r"|\beof\s*\(\s*\)")


def _cluster(word: str, row: Program) -> tuple[str, str] | None:
    """A cluster of short options holding a code option (``-le``, ``-Im``, ``-cprint(1)``):
    ``(option, glued text)``, the text empty when the next word is the option's argument.
    Letters are read as the program reads them: one taking an argument takes the rest."""
    if not row.clusters or not re.fullmatch(r"-[A-Za-z]\S*", word) or word in row.code_options:
        return None
    shorts = {o[1] for o in row.code_options if len(o) == 2}
    takes = {o[1] for o in row.arg_options if len(o) == 2}
    for i, letter in enumerate(word[1:], start=1):
        if letter in shorts:
            return f"-{letter}", word[i + 1:]
        if letter in takes or not letter.isalpha():
            return None
    return None


class _ProgramText:
    """The checks of a shell's or an interpreter's words (mixed into the argument checks)."""

    if TYPE_CHECKING:  # pragma: no cover - provided by the class this is mixed into
        hostile: Callable[[Node], bool]
        check_args: Callable[[str, list[Node]], None]
        variable_value: Callable[[Node], bool]

    def has_program_text(self, name: str, row: Program, words: list[Node]) -> bool:
        """Whether a shell or interpreter is given its program literally (``sh -c '…'``,
        ``python3 script.py``), so standard input is data to it. Interactive options
        (``python3 -i``, ``node -i``) and modules that run code (``python3 -m code``) make
        standard input code again."""
        def data(word: Node | None) -> bool:
            lit = _literal(word) if word is not None else None
            return word is not None and lit is not None and not self.hostile(word) \
                and not reads_stdin(lit)

        interactive = any(re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*|--interactive", _literal(w) or "")
                          for w in words) and row.runs == "text"
        i = 0
        while i < len(words):
            lit = _literal(words[i])
            if lit is None or self.hostile(words[i]):
                return False
            named = row.long_named(lit)  # gawk -W NAME: --NAME
            if named == "":
                i += 1
                named = "--" + (_literal(words[i]) or "") if i < len(words) else None
                if named is None or self.hostile(words[i]) or _literal(words[i]) is None:
                    return False
                named = row.long_option(named)
            lit = named if named is not None else lit
            option, glued = _cluster(lit, row) or (row.long_option(lit), "")
            if glued and option in row.code_options:  # python3 -cprint(1), -mjson.tool
                return not interactive and not (option in row.module_options
                                                and glued.split(".")[0] in CODE_MODULES)
            shell_flags = lit[1:] if row.runs == "shell" and lit.startswith("-") \
                and not lit.startswith("--") else ""
            # the options' arguments come first (bash -oc pipefail 'script')
            taking = () if option in row.code_options else row.options_taking_next(lit)
            if option in row.code_options or "c" in shell_flags:
                at = i + 1 + (len(taking) if shell_flags else 0)
                given = words[at] if at < len(words) else None
                module = _literal(given) if given is not None else None
                if option in row.module_options and (module or "").split(".")[0] in CODE_MODULES:
                    return False
                return data(given) and not interactive
            if "s" in shell_flags:
                return False  # sh -s: the script is standard input
            if taking:
                i += 1 + len(taking)
                continue
            if lit == "--":
                return data(words[i + 1] if i + 1 < len(words) else None) and not interactive
            if lit.startswith(("-", "+")) and not reads_stdin(lit):
                i += 1
                continue
            return not reads_stdin(lit) and not interactive
        return False

    def check_module(self, name: str, module: str, rest: list[Node]) -> None:
        """``python3 -m MODULE ARGS``: judged as the module reads its arguments. One that
        runs code, a script or a module they name takes no placeholder; one named like a
        program of the table is checked as that program (``-m pip install {x}``)."""
        top = module.split(".")[0]
        if module in CODE_MODULES or top in CODE_MODULES:
            if any(map(self.hostile, rest)):
                raise _Refused(f"an argument of {name} -m {module}, which runs code, a script "
                               f"or a module its arguments name",
                               "pass the value through env= (and use \"$VAR\") or stdin=")
        elif program_of(top) is not None:
            self.check_args(top, rest)

    def check_program_text(self, name: str, row: Program, words: list[Node]) -> None:
        """``sed``/``awk``/``perl -e``/``python -c``…: their program text is code (sed's
        ``e``, awk's ``system()``): placeholders only after it, as data, never in it or in
        an option. GNU sed takes options anywhere (even after its script), and perl, node
        or gawk read options after program text given with ``-e``/``-f``: there a
        placeholder must follow ``--``. perl's ``-n``/``-p`` loop, and a perl program
        reading ``<>``, open a file name ending in ``|`` as a command: no placeholder at
        all then. ``python -m MODULE`` is judged as the module (:meth:`check_module`)."""
        anywhere = canonical_name(name) in ("sed", "rename", "prename", "file-rename")
        refusal = _Refused(f"an option or the program text of {name}, which {row.why}",
                           f"write {name}'s program literally and pass the value after it"
                           + (" and after --" if anywhere else "") + ", or through env= or stdin=")
        if row is PROGRAMS["perl"]:
            self.check_perl_loop(name, words)
        if row.runs_all and any(map(self.hostile, words)):
            ran = next((lit for w in words if (lit := _literal(w)) is not None
                        and lit.split("=", 1)[0] in row.runs_all), None)
            if ran is not None:
                raise _Refused(f"an argument of {name} {ran}, which runs every file its "
                               f"arguments name as code",
                               "pass the value through env= (and use \"$VAR\") or stdin=")
        program = via_option = False
        i = 0
        while i < len(words):
            word = words[i]
            lit = _literal(word)
            if self.hostile(word) or lit is None:
                if program and not anywhere:
                    if via_option and row.after_code != "data":
                        raise _Refused(f"after {name}'s program text given with an option, "
                                       f"where {name} still reads options (or a script)",
                                       f"write -- before the placeholder ({name} -e '…' -- {{x}}), "
                                       f"or put the program in a file")
                    return  # data, after the program
                raise refusal
            if lit == "--":
                rest = words[i + 1:]
                if not program and (not rest or self.hostile(rest[0]) or _literal(rest[0]) is None):
                    raise refusal
                if via_option and row.after_code == "script" and any(map(self.hostile, rest)):
                    raise refusal
                return
            named = row.long_named(lit)  # gawk -W source 'prog': --source 'prog'
            if named == "":
                i += 1
                spelled = _literal(words[i]) if i < len(words) else None
                if spelled is None or self.hostile(words[i]):
                    raise refusal
                named = row.long_option("--" + spelled)
            lit = named if named is not None else lit
            option, glued = _cluster(lit, row) or (row.long_option(lit), "")
            if option not in row.code_options:  # python3 -bX dev: the last takes the next
                option = (row.options_taking_next(lit) or (option,))[-1]
            if glued and option in row.code_options:
                if option in row.module_options:  # python3 -mtimeit {x}
                    self.check_module(name, glued, words[i + 1:])
                    return
                program = via_option = True  # perl -le'…', python3 -cprint(1)
                i += 1
                continue
            if option in row.code_options or option in row.arg_options:
                given = words[i + 1] if i + 1 < len(words) else None
                if given is not None and option in row.variable_options and \
                        self.variable_value(given):
                    i += 2  # awk -v n={x}: a variable, data
                    continue
                if given is None or self.hostile(given) or _literal(given) is None:
                    raise refusal
                if option in row.module_options:  # python3 -m pip install {x}
                    self.check_module(name, _literal(given) or "", words[i + 2:])
                    return
                if option in row.code_options:
                    program = via_option = True
                i += 2
                continue
            if not lit.startswith("-") or lit == "-":
                program = True  # the program text or script file, written literally
                via_option = False
                if not anywhere:
                    script = program_of(lit)
                    if script is not None and script.runs == "subcommand":
                        # python3 manage.py shell -c {x}: a script of the table, checked
                        self.check_args(lit, words[i + 1:])
                    return
            i += 1

    def check_perl_loop(self, name: str, words: list[Node]) -> None:
        """perl's ``-n``/``-p`` loop, and program text reading ``<>``/``<ARGV>``, open each
        argument with the two-argument open, which runs ``cmd|`` as a command."""
        for i, word in enumerate(words):
            lit = _literal(word) or ""
            if re.fullmatch(r"-[a-zA-Z]*[np][a-zA-Z]*", lit):
                raise _Refused(f"an argument of {name} -n or -p, whose loop opens a file name "
                               f"ending in | as a command", "pass the value through env= or "
                               "stdin=")
            option, glued = _cluster(lit, PROGRAMS["perl"]) or (lit, "")
            text = glued if glued else (_literal(words[i + 1]) or "") \
                if option in ("-e", "-E") and i + 1 < len(words) else ""
            if _PERL_ARGV_LOOP.search(text):
                raise _Refused(f"an argument of {name} whose program reads <> (or <ARGV>), "
                               f"which opens a file name ending in | as a command",
                               "read <<>> or <STDIN> instead, or pass the value through env= "
                               "or stdin=")

    def check_shell(self, name: str, row: Program, words: list[Node]) -> None:
        """``sh [options] SCRIPT-OR-FILE ARGS``: data only after a literal script."""
        i = 0
        while i < len(words):
            word = words[i]
            lit = _literal(word)
            if self.hostile(word) or lit is None:
                raise _Refused(f"an option or the script of {name}, which {row.why}",
                               f"write the script literally and pass the value after it: "
                               f"{name} -c 'printf %s \"$1\"' sh {{x}}")
            if lit in ("-", "--"):
                i += 1
                break
            taking = row.options_taking_next(lit)  # -o pipefail, -eo pipefail
            if taking:
                given = words[i + 1:i + 1 + len(taking)]
                if len(given) < len(taking) or any(self.hostile(w) or _literal(w) is None
                                                   for w in given):
                    raise _Refused(f"the argument of {name} {lit} (a file or option it runs)",
                                   "write it literally")
                i += 1 + len(taking)
            elif lit.startswith(("-", "+")):
                i += 1
            else:
                return
        if i < len(words) and _literal(words[i]) is not None and not self.hostile(words[i]):
            return
        raise _Refused(f"the script of {name}, which {row.why}")
