"""Where a placeholder may stand in a ``shell(command=...)`` template (SPEC §3, shell safety).

Values are inserted shell-quoted (``shlex.quote``), which keeps them plain data
only in some places. The places are decided by a real shell parser
(tree-sitter with the bash grammar), never by scanning text: each placeholder
is replaced by a unique marker word, the template is parsed, and a marker is
accepted only

- inside an argument word of a simple command (also inside ``$(…)``, whose
  output must itself land in such a place or in double quotes), or
- as a redirection target (``> {x}``, ``<<< {x}``),

and only when the command is not one that runs its arguments as code
(``eval``, ``.``, ``sh -c``, ``trap`` …), takes them as variable names or
arithmetic (``let``, ``declare``, ``unset``, ``read``, ``printf -v``,
``test -v`` … where bash evaluates ``a[$(…)]``), or may run the value as a
program (``env``, ``exec``, ``command``, ``xargs`` …). Everything else, and a
template that does not parse, is refused. The rule holds for ``dash`` and
``bash --posix`` alike; ``tests/test_shell_fuzz.py`` fuzzes both.

The parser is imported lazily, only for a command that has placeholders, so
``import brain`` stays light.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from brain import placeholders

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tree_sitter import Node, Parser

_ADVICE = ("write it as a separate argument of a command (e.g. printf '%s\\n' {x}), or pass the "
           "value through env= (and use \"$VAR\") or stdin=")
_QUOTE_ADVICE = "write it bare (without quotes): its value is shell-quoted for you"

# Commands whose arguments become shell code.
_RUNS_CODE = {
    "eval", ".", "source", "trap", "alias", "unalias", "bind", "complete", "compgen", "compopt",
    "enable", "fc", "history", "jobs", "ssh", "su", "runuser", "watch", "script", "parallel",
    "flock",
}
# Builtins that take variable names, options or arithmetic; bash evaluates array
# subscripts there, so 'a[$(cmd)]' runs cmd.
_TAKES_NAMES = {
    "let", "declare", "typeset", "local", "export", "readonly", "unset", "read", "readarray",
    "mapfile", "getopts", "wait", "set", "shopt", "hash", "select", "ulimit", "caller", "shift",
    "return", "exit", "break", "continue",
}
# Programs that run a command given in their arguments.
_WRAPPERS = {
    "command", "builtin", "exec", "env", "nice", "nohup", "time", "timeout", "setsid", "stdbuf",
    "xargs", "sudo", "doas", "chrt", "ionice", "taskset", "chroot", "unbuffer",
    "busybox", "coproc", "strace", "ltrace", "setpriv", "unshare", "nsenter", "systemd-run",
    "firejail", "valgrind", "catchsegv", "fakeroot", "proot", "torsocks", "proxychains",
    "proxychains4", "caffeinate", "chpst", "softlimit", "envdir", "setuidgid", "s6-setuidgid",
}
# Programs whose program text is code; (options that give the code, options taking an
# argument). A placeholder may follow the program text, never stand in it or before it.
_INTERPRETERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    name: (frozenset(code), frozenset(args)) for name, code, args in [
        ("sed", ("-e", "--expression", "-f", "--file"), ("-l", "--line-length")),
        ("awk", ("-f", "--file", "-e", "--source"), ("-F", "-v", "--field-separator", "--assign")),
        ("gawk", ("-f", "--file", "-e", "--source"), ("-F", "-v", "--field-separator", "--assign")),
        ("mawk", ("-f",), ("-F", "-v")),
        ("nawk", ("-f",), ("-F", "-v")),
        ("busybox", (), ()),
        ("perl", ("-e", "-E"), ("-I", "-M", "-m")),
        ("ruby", ("-e",), ("-I", "-r")),
        ("node", ("-e", "--eval", "-p", "--print"), ("-r", "--require")),
        ("nodejs", ("-e", "--eval", "-p", "--print"), ("-r", "--require")),
        ("php", ("-r",), ("-d", "-c")),
        ("lua", ("-e",), ("-l",)),
        ("python", ("-c", "-m"), ("-W", "-X")),
        ("Rscript", ("-e",), ()),
        ("tclsh", (), ()),
    ]}
_PYTHON = re.compile(r"python[0-9.]*|pypy[0-9.]*")
# Wrappers with no option that takes an argument: the first plain word is the program.
_PLAIN_WRAPPERS = {"command", "builtin", "nohup", "setsid", "coproc", "time"}
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash", "posh",
           "rbash", "fish", "csh", "tcsh", "rc", "es", "oksh", "loksh", "hush", "osh", "oil"}
_SHELL_OPTS_WITH_ARG = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}
_TEST_UNARY = {"!", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-L", "-n", "-N", "-O",
               "-G", "-p", "-r", "-s", "-S", "-t", "-u", "-w", "-x", "-z", "-a", "-o"}
_TEST_BINARY = {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot",
                "-ef", "-a", "-o"}
# `${v:-x}` and friends: the word after the operator is plain data once quoted.
_EXPANSION_OPS = {"-", ":-", "+", ":+", "?", ":?", "#", "##", "%", "%%"}
# Node types a command (a statement) may sit in.
_STATEMENT_PARENTS = {
    "program", "list", "pipeline", "redirected_statement", "subshell", "if_statement",
    "elif_clause", "else_clause", "while_statement", "do_group", "for_statement",
    "c_style_for_statement", "case_item", "case_statement", "function_definition",
    "negated_command",
}
_UNDERSCORE = re.compile(r"(?<![\w$])_(?!\w)")
_DOLLAR_UNDERSCORE = re.compile(r"\$_(?!\w)|\$\{[#!]?_(?!\w)")


class _Refused(Exception):
    """Internal: one marker stands where its value would not be plain data."""

    def __init__(self, context: str, advice: str = _ADVICE) -> None:
        super().__init__(context)
        self.context = context
        self.advice = advice


@lru_cache(maxsize=1)
def _parser() -> Parser:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def shell_problem(command: str) -> str | None:
    """Why the placeholders in shell ``command`` may not stand where they are, or ``None``.

    >>> shell_problem("grep -- {pattern} notes.txt") is None
    True
    >>> shell_problem('echo "{x}"')  # doctest: +ELLIPSIS
    'placeholder {x} is inside double quotes "…"; write it bare ...'
    """
    return _check(command)


def argv_problem(words: Sequence[str]) -> str | None:
    """The same rules for a program run without a shell (``argv=``, an MCP
    ``server_command``): a placeholder may not be the program, nor what a program it
    runs takes as code (``sh -c {x}``, ``env {x}``, ``python -c {x}``...).

    >>> argv_problem(["grep", "--", "{pattern}", "notes.txt"]) is None
    True
    """
    if not any(placeholders.has_placeholders(w) for w in words):
        return None
    # Each literal piece quoted, each placeholder bare: what a shell would run.
    command = " ".join(
        "".join(shlex.quote(p) if isinstance(p, str) else p.text for p in placeholders.parse(w))
        or "''" for w in words)
    return _check(command)


@lru_cache(maxsize=1024)
def _check(command: str) -> str | None:
    parts = placeholders.parse(command)
    if not any(isinstance(p, placeholders.Ref) for p in parts):
        return None
    prefix = "_brainph"
    joined_command = _join_continuations(command)
    while prefix in command or prefix in joined_command:
        prefix += "x"
    pieces: list[str] = []
    spans: list[tuple[placeholders.Ref, int, int]] = []
    size = 0
    for part in parts:
        if isinstance(part, placeholders.Ref):
            marker = f"{prefix}{len(spans)}_"
            spans.append((part, size, size + len(marker)))
            text = marker
        else:
            text = part
        pieces.append(text)
        size += len(text.encode())
    marked = "".join(pieces)
    first = spans[0][0].text
    blank = _odd_blank(marked)
    if blank:
        return (f"the command has placeholders (first {first}) and {blank}, which the shells and "
                f"the check could read differently; use plain spaces and newlines, or pass the "
                f"values through env= or stdin=")
    unjoinable = _continuation_not_joined(marked)
    if unjoinable:
        return (f"the command has placeholders (first {first}) and a backslash at the end of a "
                f"line {unjoinable}, where the shells do not join lines; remove it, or pass the "
                f"values through env= or stdin=")
    # The shells join a backslash-newline before anything else: judge the joined text, so
    # what the joining glues together is judged together.
    marked = _join_continuations(marked)
    source = marked.encode()
    markers = [f"{prefix}{i}_".encode() for i in range(len(spans))]
    if any(source.count(m) != 1 for m in markers):
        return (f"placeholder {first} cannot be checked: the command's text reads like the "
                f"check's own markers; {_ADVICE}")
    spans = [(ref, source.find(m), source.find(m) + len(m))
             for (ref, _, _), m in zip(spans, markers, strict=True)]
    tree = _parser().parse(source)
    root = tree.root_node
    if root.has_error:
        bad = _first_error(root)
        line = bad.start_point[0] + 1 if bad is not None else 1
        return (f"the command has placeholders (first {first}) but does not parse as a shell "
                f"script (line {line}), so it cannot be checked; fix the syntax, or pass the "
                f"values through env= or stdin=")
    for ref, start, end in spans:
        try:
            _Marker(source, prefix, start, end).check(root)
        except _Refused as exc:
            return f"placeholder {ref.text} is {exc.context}; {exc.advice}"
        except RecursionError:
            return (f"placeholder {ref.text} is nested too deeply to be checked; "
                    f"{_ADVICE}")
    # Where each placeholder stands is fine; now what else in the command could still
    # turn its value into code.
    problem = _global_problem(root, marked)
    if problem:
        return f"placeholder {first} cannot be checked: {problem}; {_ADVICE}"
    return None


_CONTINUATION = re.compile(r"(\\+)\n")
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
# [[ … ]], ((…)) (not $((…))), $[…], a[…]=, ${v/pattern/…}: bash-only, and dash or
# tree-sitter read them differently from bash.
_BASH_ONLY = re.compile(r"\[\[|(?<!\$)\(\(|\$\[|[\w\]]\[[^\]\n]*\]\+?=|\$\{[#!]?\w+//?")
_SET_KEYWORD = re.compile(r"(?<![\w-])set(?![\w-])[^;&|\n]*(?:\s[-+][a-zA-Z]*k|keyword)")


_NOT_JOINED = {"comment": "in a comment", "heredoc_body": "in a here-document",
               "heredoc_content": "in a here-document", "raw_string": "inside single quotes",
               "ansi_c_string": "inside $'…'"}


def _continuation_not_joined(text: str) -> str | None:
    """Where a backslash-newline stands that the shells would not join (a comment, quoted
    text, a here-document body), or ``None``; joining it there would misjudge the rest."""
    if "\\\n" not in text:
        return None
    source = text.encode()
    for node in _walk(_parser().parse(source).root_node):
        where = _NOT_JOINED.get(node.type)
        if where is None:
            continue
        end = node.end_byte
        if b"\\\n" in (node.text or b"") or (source[end - 1:end + 1] == b"\\\n"):
            return where
    return None


def _join_continuations(text: str) -> str:
    """``text`` with every backslash-newline line continuation removed (an even run of
    backslashes before a newline is escaped backslashes, and stays)."""
    def join(m: re.Match[str]) -> str:
        run = m.group(1)
        return run[:-1] if len(run) % 2 else m.group(0)

    return _CONTINUATION.sub(join, text)


def _odd_blank(text: str) -> str | None:
    """Blanks that tree-sitter and the shells do not agree on, or ``None``."""
    for ch, what in (("\r", "a carriage return"), ("\v", "a vertical tab"),
                     ("\f", "a form feed")):
        if ch in text:
            return f"contains {what}"
    if "\\ " in text or "\\\t" in text:
        return "contains a backslash before a space or tab"
    odd = next((c for c in text if not c.isascii() and (c.isspace() or
                                                         unicodedata.category(c) in ("Zs", "Cf"))),
               None)
    if odd is not None:
        return f"contains the character U+{ord(odd):04X} (a space that is not a plain space)"
    return None


def _first_error(root: Node) -> Node | None:
    return next((n for n in _walk(root) if n.type == "ERROR" or n.is_missing), None)


def _walk(root: Node) -> list[Node]:
    """Every node under ``root``, in document order (no recursion: nesting may be deep)."""
    out: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _global_problem(root: Node, marked: str) -> str | None:
    """Template-wide reasons no placeholder can be trusted."""
    # Quotes and backslashes removed, as the shell removes them from words: al''ias, a\lias.
    bare = re.sub(r"['\"\\\\]", "", marked)
    if "alias" in bare.lower():
        return ("the command mentions alias, which could turn any word into code (however "
                "it is run: alias, command alias, eval 'alias ...', BASH_ALIASES)")
    if _SET_KEYWORD.search(bare):
        return "set -k / set -o keyword makes any NAME=value argument an assignment"
    if "$'" in marked:
        return "it uses $'…' quoting, which dash does not have (it reads it differently)"
    bash_only = _BASH_ONLY.search(marked)
    if bash_only:
        return (f"it uses {bash_only.group(0).strip()!r}, bash-only syntax that dash reads "
                f"differently (a << inside it starts a here-document in dash)")
    if _UNDERSCORE.search(marked) or _DOLLAR_UNDERSCORE.search(marked):
        return ("it uses the shell variable _ (the last argument, so a placeholder's value), "
                "which bash evaluates in arithmetic and subscripts")
    for node in _walk(root):
        if node.type in ("word", "concatenation", "brace_expression") \
                and _BRACES.search(_text(node)):
            return "it uses brace expansion ({a,b}), which bash turns into several words"
    for node in _walk(root):
        name = node.child_by_field_name("name") if node.type == "command" else None
        if name is not None and _literal(name) in ("alias", "unalias"):
            return "the command defines an alias, which could turn any word into code"
        if node.type in ("arithmetic_expansion", "subscript", "test_command", "variable_assignment",
                         "c_style_for_statement") or (
                node.type == "compound_statement" and _text(node).startswith("((")):
            if _UNDERSCORE.search(_text(node)):
                return ("it uses the shell variable _ (the last argument, so a placeholder's "
                        "value) in arithmetic")
    for node in _walk(root):
        if node.type == "heredoc_redirect" and not _heredoc_ends_cleanly(node, marked):
            return ("a here-document does not end with a line that is exactly its delimiter "
                    "(the shell would read on to the end of the command)")
    if _DOLLAR_UNDERSCORE.search(marked):
        return "it uses $_ (the last argument of the previous command, so a placeholder's value)"
    return None


def _heredoc_ends_cleanly(redirect: Node, marked: str) -> bool:
    """Whether the shell ends this here-document where tree-sitter says it does."""
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    end = next((c for c in redirect.children if c.type == "heredoc_end"), None)
    if start is None or end is None:
        return False
    try:
        delimiter = "".join(shlex.split(_text(start))) if _text(start) else ""
    except ValueError:
        return False
    source = marked.encode()
    line_start = source.rfind(b"\n", 0, end.start_byte) + 1
    line_end = source.find(b"\n", end.start_byte)
    line = source[line_start: len(source) if line_end == -1 else line_end].decode("utf-8",
                                                                                  "replace")
    if _text(redirect).startswith("<<-"):
        line = line.lstrip("\t")
    return line == delimiter


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _field(node: Node) -> str | None:
    parent = node.parent
    if parent is None:
        return None
    for i, child in enumerate(parent.children):
        if child.id == node.id:
            return parent.field_name_for_child(i)
    return None


_EXPRESSIONS = {"binary_expression", "unary_expression", "ternary_expression",
                "postfix_expression", "parenthesized_expression", "negated_expression"}
_HEREDOC = {"heredoc_body", "heredoc_content", "heredoc_redirect", "heredoc_start", "heredoc_end"}
_HEREDOC_REFUSAL = ("inside a here-document, where quotes are not removed and $(…) still runs",
                    "write it bare in the command or pass the text with stdin=")
_NAME_REFUSAL = ("the command name itself, so the value would choose the program to run",
                 "write the program literally and pass the value as an argument, or use argv=")
_BACKTICK_REFUSAL = ("inside backticks `…`, where backslashes and quotes are processed again",
                     "write it bare inside $(…) instead of backticks")
_GLOB = re.compile(r"[*?\[]")


def _what(kind: str) -> str:
    return f"in a place the check does not allow ({kind.replace('_', ' ')})"


class _Marker:
    """One marker: walks up the syntax tree from it and refuses what is not plain data."""

    def __init__(self, source: bytes, prefix: str, start: int, end: int) -> None:
        self.source = source
        self.prefix = prefix
        self.start = start
        self.end = end

    def check(self, root: Node) -> None:
        """Raise :class:`_Refused` unless the marker stands as plain data."""
        if self.start > 0 and self.source[self.start - 1] == ord("\\"):
            raise _Refused("right after a backslash (\\), which would make the value's opening "
                           "quote a literal character")
        if self.end < len(self.source) and self.source[self.end] in b"<>":
            raise _Refused("directly before a redirection (< or >), where a digit value would "
                           "become a file descriptor; add a space")
        node = root.descendant_for_byte_range(self.start, self.end)
        if node is None:  # pragma: no cover - the marker is always inside the tree
            raise _Refused("somewhere the shell parser cannot place")
        self.climb_value(node, None, output=False)

    # --- where the value (or a $(…) output holding it) lands -------------------------------

    def climb_value(self, node: Node | None, child: Node | None, *, output: bool) -> None:
        """Walk up from the word holding the marker; ``output`` once past a ``$(…)``."""
        while node is not None:
            kind = node.type
            if kind in ("word", "concatenation", "number", "regex", "extglob_pattern",
                        "string_content", "variable_name"):
                pass
            elif kind == "string":
                if not output:
                    raise _Refused('inside double quotes "…"', _QUOTE_ADVICE)
            elif kind == "raw_string":
                raise _Refused("inside single quotes '…'", _QUOTE_ADVICE)
            elif kind == "ansi_c_string":
                raise _Refused("inside $'…' quotes", _QUOTE_ADVICE)
            elif kind == "translated_string":
                raise _Refused('inside $"…" quotes', _QUOTE_ADVICE)
            elif kind == "comment":
                raise _Refused("in a comment, where a newline in the value would end the "
                               "comment")
            elif kind in _HEREDOC:
                raise _Refused(*_HEREDOC_REFUSAL)
            elif kind == "simple_expansion" and child is not None and \
                    child.type == "variable_name" and child.start_byte < self.start:
                pass  # `$v{x}`: the marker lengthens the name, the quoted value does not
            elif kind in ("simple_expansion", "special_variable_name"):
                raise _Refused("glued to a variable name ($NAME{x} reads one longer name); "
                               "write ${NAME}{x}")
            elif kind == "expansion":
                self.check_expansion(node, child)
            elif kind in ("command_substitution", "process_substitution"):
                if _text(node).startswith("`"):
                    raise _Refused(*_BACKTICK_REFUSAL)
                raise _Refused(_what(kind))
            elif kind == "command_name":
                raise _Refused(*_NAME_REFUSAL)
            elif kind == "command":
                if child is None or child.type == "command_name":
                    raise _Refused(*_NAME_REFUSAL)
                if child.type == "variable_assignment":
                    raise _Refused("in an assignment (NAME={x} cmd), whose variable may be "
                                   "evaluated as arithmetic or as a name")
                self.check_command(node)
                self.climb_statement(node)
                return
            elif kind == "herestring_redirect":
                owner = node.parent
                name = owner.child_by_field_name("name") if owner is not None else None
                if name is not None and _literal(name) in _TAKES_NAMES:
                    raise _Refused(f"a here-string read by {_literal(name)}, which assigns it "
                                   f"to a variable (like NAME={{x}})")
                self.climb_statement(node)
                return
            elif kind == "file_redirect":
                dests = [c for i, c in enumerate(node.children)
                         if node.field_name_for_child(i) == "destination"]
                if child is None or not dests:
                    raise _Refused(_what(kind))
                if dests[0].id == child.id:
                    if any(c.type in ("<&", ">&", ">&-", "<&-") for c in node.children):
                        raise _Refused("the target of >& or <&, which bash expands a second "
                                       "time when it is not a descriptor number",
                                       "write > {x} (or &> {x}) to send output to a file")
                    if any(c.type in ("<", "<>") for c in node.children):
                        self.check_input_of(_owner_command(node))
                    self.climb_statement(node)
                    return
                # tree-sitter files the words after a redirection under it: they are
                # arguments of the command.
                cmd = _owner_command(node)
                if cmd is None:
                    raise _Refused(_what("redirection of a compound command"))
                self.check_command(cmd)
                self.climb_statement(cmd)
                return
            elif kind == "test_command" or kind in _EXPRESSIONS:
                test = node
                while test.type in _EXPRESSIONS and test.parent is not None:
                    test = test.parent
                if test.type == "test_command" and _text(test).startswith("[["):
                    raise _Refused("inside [[ … ]], where bash evaluates operands as arithmetic",
                                   "use [ … ] with the placeholder as a separate operand, or "
                                   "pass the value through env=")
                if test.type != "test_command":
                    raise _Refused("inside arithmetic, which evaluates the value as an "
                                   "expression (a[$(…)] runs)")
                self.check_test("[", _flatten_test(test))
                self.climb_statement(test)
                return
            elif kind in ("arithmetic_expansion", "c_style_for_statement") or (
                    kind == "compound_statement" and _text(node).startswith("((")):
                raise _Refused("inside arithmetic ($((…)), ((…))), which evaluates the value "
                               "as an expression (a[$(…)] runs)")
            elif kind == "subscript":
                raise _Refused("in an array subscript, which bash evaluates as arithmetic")
            elif kind in ("variable_assignment", "variable_assignments"):
                raise _Refused("in an assignment (NAME={x}), whose variable may later be "
                               "evaluated as arithmetic or as a name")
            elif kind in ("declaration_command", "unset_command"):
                word = _text(node).split(None, 1)[0]
                raise _Refused(f"an argument of {word}, which takes variable names and "
                               f"evaluates array subscripts in them (a[$(…)] runs)")
            elif kind == "case_item":
                raise _Refused("in a case pattern")
            elif kind == "case_statement":
                raise _Refused("the word of a case statement")
            elif kind == "for_statement":
                raise _Refused("in the word list of a for loop (it is assigned to the loop "
                               "variable)")
            elif kind == "function_definition":
                raise _Refused("the name of a function")
            else:
                raise _Refused(_what(kind))
            child, node = node, node.parent
        raise _Refused("outside any command")  # pragma: no cover - the root is a program

    def check_expansion(self, node: Node, child: Node | None) -> None:
        """Inside ``${…}`` only the word after ``:-``, ``:+``, ``#``, ``%`` … is data."""
        ops = [c for i, c in enumerate(node.children)
               if node.field_name_for_child(i) == "operator"]
        if (len(ops) != 1 or _text(ops[0]) not in _EXPANSION_OPS or child is None
                or child.start_byte < ops[0].end_byte or child.type in (
                    "variable_name", "subscript", "special_variable_name")):
            raise _Refused("inside ${…} other than the word of ${VAR:-word}, ${VAR:+word}, "
                           "${VAR#word} or ${VAR%word}")

    # --- where a command holding the value sits ---------------------------------------------

    def climb_statement(self, node: Node) -> None:
        """The value is data in statement ``node``; check the places around it."""
        child, current = node, node.parent
        while current is not None:
            kind = current.type
            if kind in ("command", "redirected_statement") and child.type in (
                    "herestring_redirect", "file_redirect"):
                pass
            elif kind in _STATEMENT_PARENTS:
                if _field(child) in ("value", "name", "variable"):
                    raise _Refused(_what(kind))
            elif kind == "heredoc_redirect" and child.type not in _HEREDOC:
                pass  # tree-sitter nests the rest of the `<<EOF` line here
            elif kind == "compound_statement":
                if _text(current).startswith("(("):
                    raise _Refused("inside arithmetic ((…))")
            elif kind in ("command_substitution", "process_substitution"):
                if _text(current).startswith("`"):
                    raise _Refused(*_BACKTICK_REFUSAL)
                # The output of $(…) now stands where the $(…) is written.
                self.climb_value(current.parent, current, output=True)
                return
            elif kind in _HEREDOC:
                raise _Refused(*_HEREDOC_REFUSAL)
            else:
                raise _Refused(_what(kind))
            child, current = current, current.parent

    # --- what the command does with its arguments ------------------------------------------

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
        if base in _RUNS_CODE:
            raise _Refused(f"an argument of {base}, which runs its arguments as shell code",
                           "pass the value through env= (and use \"$VAR\") or stdin=")
        if base in _TAKES_NAMES:
            raise _Refused(f"an argument of {base}, which takes variable names, options or "
                           f"arithmetic (bash evaluates a[$(…)] there)")
        if base == "printf":
            self.check_printf(words)
        elif base in ("test", "["):
            if base == "[" and words and _literal(words[-1]) == "]":
                words = words[:-1]
            self.check_test(base, words)
        elif base in _SHELLS:
            self.check_shell(base, words)
        elif base in _WRAPPERS:
            self.check_wrapper(base, words)
        elif base in _INTERPRETERS or _PYTHON.fullmatch(base):
            self.check_program_text(base, words)
        elif base == "find":
            self.check_find(words)

    def check_input_of(self, cmd: Node | None) -> None:
        """``sh < {x}``, ``. /dev/stdin < {x}``: a file the value names would be read as the
        script. Any command that reads its program from stdin is refused."""
        name_node = cmd.child_by_field_name("name") if cmd is not None else None
        name = _literal(name_node) if name_node is not None else None
        base = (name or "").rsplit("/", 1)[-1]
        if (name is None or base in _SHELLS or base in _RUNS_CODE or base in _WRAPPERS
                or base in _INTERPRETERS or _PYTHON.fullmatch(base)):
            raise _Refused(f"the file {base or 'a command'} reads from standard input, which it "
                           f"may run as its script", "read the file with a fixed program, or "
                           "pass its text through stdin=")

    def check_program_text(self, name: str, words: list[Node]) -> None:
        """``sed``/``awk``/``perl -e``/``python -c``…: their program text is code (sed's
        ``e``, awk's ``system()``): placeholders only after it, as data, never in it or in
        an option. GNU sed takes options anywhere (even after its script), so there a
        placeholder must follow ``--``."""
        code_opts, arg_opts = _INTERPRETERS.get(name, _INTERPRETERS["python"])
        anywhere = name == "sed"
        refusal = _Refused(f"an option or the program text of {name}, which it runs as code",
                           f"write {name}'s program literally and pass the value after it"
                           + (" and after --" if anywhere else "") + ", or through env= or stdin=")
        program = False
        i = 0
        while i < len(words):
            word = words[i]
            lit = _literal(word)
            if self.hostile(word) or lit is None:
                if program and not anywhere:
                    return  # data, after the program
                raise refusal
            if lit == "--":
                rest = words[i + 1:]
                if not program and (not rest or self.hostile(rest[0]) or _literal(rest[0]) is None):
                    raise refusal
                return
            if lit in code_opts or lit in arg_opts:
                given = words[i + 1] if i + 1 < len(words) else None
                if given is None or self.hostile(given) or _literal(given) is None:
                    raise refusal
                program = program or lit in code_opts
                i += 2
                continue
            if not lit.startswith("-") or lit == "-":
                program = True  # the program text or script file, written literally
                if not anywhere:
                    return
            i += 1

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

    def check_shell(self, name: str, words: list[Node]) -> None:
        """``sh [options] SCRIPT-OR-FILE ARGS``: data only after a literal script."""
        i = 0
        while i < len(words):
            word = words[i]
            lit = _literal(word)
            if self.hostile(word) or lit is None:
                raise _Refused(f"an option or the script of {name} (sh -c runs its script "
                               f"as code)", f"write the script literally and pass the value "
                               f"after it: {name} -c 'printf %s \"$1\"' sh {{x}}")
            if lit in ("-", "--"):
                i += 1
                break
            if lit in _SHELL_OPTS_WITH_ARG:
                given = words[i + 1] if i + 1 < len(words) else None
                if given is None or self.hostile(given) or _literal(given) is None:
                    raise _Refused(f"the argument of {name} {lit} (a file or option it runs)",
                                   "write it literally")
                i += 2
            elif lit.startswith(("-", "+")):
                i += 1
            else:
                return
        if i < len(words) and _literal(words[i]) is not None and not self.hostile(words[i]):
            return
        raise _Refused(f"the script of {name}, which it runs as code")

    def check_wrapper(self, name: str, words: list[Node]) -> None:
        """``env``/``exec``/``xargs``…: the program they run must be written out first."""
        after_option = False
        for i, word in enumerate(words):
            if self.hostile(word):  # before the program is certain: it may be the program
                raise _Refused(f"an argument of {name}, which may take it as the program to run "
                               f"(or as one of its options)", "write the program after "
                               f"{name} literally and the placeholder after it")
            lit = _literal(word)
            if lit is None:
                raise _Refused(f"an argument of {name} after a word that is not literal, so the "
                               f"check cannot tell what {name} runs")
            if lit.startswith("-") or "=" in lit or re.fullmatch(r"[0-9.]+[smhd]?", lit):
                after_option = lit.startswith("-")
                continue
            # Right after an option this may be the option's argument, so the program may
            # come later: check every such candidate until one is certain.
            self.check_args(lit, words[i + 1:])
            if name in _PLAIN_WRAPPERS or not after_option:
                return  # certain: check_args judged the rest
            after_option = False
        raise _Refused(f"an argument of {name}")  # pragma: no cover - marker is a word


def _flatten_test(test: Node) -> list[Node]:
    out: list[Node] = []

    def visit(node: Node) -> None:
        for child in node.children:
            if child.type in _EXPRESSIONS:
                visit(child)
            elif node is test and child.type in ("[", "]"):
                continue
            else:
                out.append(child)

    visit(test)
    return out


def _owner_command(redirect: Node) -> Node | None:
    parent = redirect.parent
    if parent is not None and parent.type == "heredoc_redirect":
        parent = parent.parent
    if parent is None:
        return None
    if parent.type == "command":
        return parent
    if parent.type == "redirected_statement":
        body = parent.child_by_field_name("body")
        # tree-sitter hangs `a && b 2> f` on the whole list; the shell gives it to `b`.
        while body is not None and body.type in ("list", "pipeline", "negated_command") \
                and body.named_children:
            body = body.named_children[-1]
        if body is not None and body.type == "command":
            return body
    return None


def _command_words(cmd: Node) -> list[Node]:
    """The argument words of ``cmd`` in order, with those tree-sitter files under redirections."""
    words = [c for i, c in enumerate(cmd.children) if cmd.field_name_for_child(i) == "argument"]
    holders = [cmd]
    up = cmd.parent
    while up is not None and up.type in ("list", "pipeline", "negated_command") \
            and up.named_children \
            and up.named_children[-1].id == cmd.id:
        up = up.parent  # see _owner_command
    if up is not None and up.type == "redirected_statement":
        holders.append(up)
    for holder in list(holders):
        holders.extend(c for c in holder.children if c.type == "heredoc_redirect")
    for holder in holders:
        for redirect in holder.children:
            if redirect.type != "file_redirect":
                continue
            dests = [c for i, c in enumerate(redirect.children)
                     if redirect.field_name_for_child(i) == "destination"]
            words.extend(dests[1:])
    return sorted(words, key=lambda n: n.start_byte)


def _single(node: Node) -> bool:
    """Whether ``node`` is always exactly one word (no unquoted expansion or glob)."""
    if node.type in ("raw_string", "string", "ansi_c_string", "number"):
        return True
    if node.type == "word":
        return not _GLOB.search(_text(node))
    if node.type == "concatenation":
        return all(_single(c) for c in node.children)
    return node.type in ("test_operator", "=", "==", "!=", "<", ">", "!")


def _literal(node: Node) -> str | None:
    """The word ``node`` stands for when it has no expansion at all, else ``None``."""
    if node.type in ("command_name", "concatenation"):
        if not all(_literal(c) is not None for c in node.children):
            return None
    elif node.type == "string":
        if any(c.type not in ('"', "string_content") for c in node.children):
            return None
    elif node.type not in ("word", "raw_string", "number", "test_operator", "=", "==", "!=",
                           "<", ">", "!"):
        return None
    text = _text(node)
    if text in ("[", "]"):
        return text
    if _GLOB.search(text.replace("\\[", "").replace("\\*", "").replace("\\?", "")) and \
            node.type == "word":
        return None
    try:
        split = shlex.split(text)
    except ValueError:
        return None
    return split[0] if len(split) == 1 else None
