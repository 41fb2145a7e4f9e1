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
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from brain import placeholders
from brain._errors import PlaceholderError
from brain.placeholders import Quoting
from brain.shell_check.programs import CODE_MODULES, PROGRAMS, Program, program_of, reads_stdin

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tree_sitter import Node, Parser

_ADVICE = ("write it as a separate argument of a command (e.g. printf '%s\\n' {x}), or pass the "
           "value through env= (and use \"$VAR\") or stdin=")
_QUOTE_ADVICE = "write it bare or inside plain \"…\" or '…' quotes: its value is escaped for you"

# Wrappers with no option that takes an argument: the first plain word is the program.
_PLAIN_WRAPPERS = {"command", "builtin", "nohup", "setsid", "coproc", "time"}
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
    >>> shell_problem('echo "Hello, {name}!"') is None
    True
    >>> shell_problem("eval {x}")  # doctest: +ELLIPSIS
    'placeholder {x} is an argument of eval, which runs its arguments as shell code; ...'
    """
    return _check(command)[0]


def render_command(command: str, lookup: Callable[[placeholders.Ref], str]) -> str:
    r"""Fill in shell ``command`` as the runner runs it: each value shell-quoted where it
    stands bare, escaped for double quotes inside ``"…"`` and for single quotes inside
    ``'…'``. Raises :class:`~brain.PlaceholderError` for a command the check refuses
    (a value must never be written where it would not be data).

    >>> print(render_command('echo "Hi, {who}!" {who}', lambda ref: "it's $HOME"))
    echo "Hi, it's \$HOME!" 'it'"'"'s $HOME'
    """
    problem, quoting = _check(command)
    if problem is not None:
        raise PlaceholderError(problem)
    return placeholders.render(command, lookup, shell_quote=quoting)


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
    return _check(command)[0]


@lru_cache(maxsize=1024)
def _check(command: str) -> tuple[str | None, tuple[Quoting, ...]]:
    """The problem with ``command``'s placeholders (or ``None``) and, when there is none,
    how each placeholder's value is written in, in order."""
    parts = placeholders.parse(command)
    if not any(isinstance(p, placeholders.Ref) for p in parts):
        return None, ()
    try:
        quoting = _quoting(command, parts)
    except _Problem as exc:
        return str(exc), ()
    return None, quoting


class _Problem(Exception):
    """Internal: the command cannot be accepted (the message says why)."""


def _quoting(command: str, parts: tuple[placeholders.Part, ...]) -> tuple[Quoting, ...]:
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
        raise _Problem(f"the command has placeholders (first {first}) and {blank}, which the shells and "
                f"the check could read differently; use plain spaces and newlines, or pass the "
                f"values through env= or stdin=")
    unjoinable = _continuation_not_joined(marked)
    if unjoinable:
        raise _Problem(f"the command has placeholders (first {first}) and a backslash at the end "
                       f"of a line {unjoinable}, where the shells do not join lines; remove it, "
                       f"or pass the values through env= or stdin=")
    if "\\\n" in marked and _HEREDOC_OPERATOR.search(marked):
        # dash and bash disagree on a here-document line that ends with a backslash (bash
        # joins it to the next, dash does not): where the here-document ends is unknowable.
        raise _Problem(f"the command has placeholders (first {first}), a here-document and a "
                       f"backslash at the end of a line, and the shells disagree on where such "
                       f"a here-document ends; remove the backslash, or pass the text through "
                       f"stdin=")
    # The shells join a backslash-newline before anything else: judge the joined text, so
    # what the joining glues together is judged together.
    marked = _join_continuations(marked)
    source = marked.encode()
    markers = [f"{prefix}{i}_".encode() for i in range(len(spans))]
    if any(source.count(m) != 1 for m in markers):
        raise _Problem(f"placeholder {first} cannot be checked: the command's text reads like "
                       f"the check's own markers; {_ADVICE}")
    spans = [(ref, source.find(m), source.find(m) + len(m))
             for (ref, _, _), m in zip(spans, markers, strict=True)]
    tree = _parser().parse(source)
    root = tree.root_node
    if root.has_error:
        bad = _first_error(root)
        line = bad.start_point[0] + 1 if bad is not None else 1
        raise _Problem(f"the command has placeholders (first {first}) but does not parse as a "
                       f"shell script (line {line}), so it cannot be checked; fix the syntax, or "
                       f"pass the values through env= or stdin=")
    quoting: list[Quoting] = []
    for ref, start, end in spans:
        checker = _Marker(source, prefix, start, end)
        try:
            checker.check(root)
        except _Refused as exc:
            raise _Problem(f"placeholder {ref.text} is {exc.context}; {exc.advice}") from None
        except RecursionError:
            raise _Problem(f"placeholder {ref.text} is nested too deeply to be checked; "
                           f"{_ADVICE}") from None
        quoting.append(checker.quoting)
    try:
        _Marker(source, prefix, 0, 0).check_template_readers(root)
    except _Refused as exc:
        raise _Problem(f"placeholder {first} is {exc.context}; {exc.advice}") from None
    # Where each placeholder stands is fine; now what else in the command could still
    # turn its value into code.
    problem = _global_problem(root, marked)
    if problem:
        raise _Problem(f"placeholder {first} cannot be checked: {problem}; {_ADVICE}")
    return tuple(quoting)


_CONTINUATION = re.compile(r"(\\+)\n")
_HEREDOC_OPERATOR = re.compile(r"(?<!<)<<(?!<)")
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
# [[ … ]], ((…)) (not $((…))), $[…], a[…]=, ${v/pattern/…}: bash-only, and dash or
# tree-sitter read them differently from bash.
_BASH_ONLY = re.compile(r"\[\[|(?<!\$)\(\(|\$\[|[\w\]]\[[^\]\n]*\]\+?=|\$\{[#!]?\w+//?")
_SET_DYNAMIC = re.compile(r"(?<![\w-])set(?![\w-])[^;&|\n]*[$`]")
# A requirement whose package is written out, then a version operator: "tool=={v}".
_PINNED = re.compile(r"""["']?[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]*\])?"""
                     r"(?:===|==|>=|<=|~=|!=|<|>)")
_NUMBERED_INPUT = re.compile(r"(?:^|[\s;&|(){}])\d+<")
# A `$` that is not part of `$$` (the shell's pid), before a blank or at the end.
_LONE_DOLLAR = re.compile(r"(?<!\$)(?:\$\$)*\$(?=\s|$)")
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
    if _SET_DYNAMIC.search(marked):
        return ("set is given an option that is not written literally (set -o $opt could be "
                "set -o keyword, which makes any NAME=value argument an assignment)")
    if _NUMBERED_INPUT.search(marked):
        return ("an input redirection names its descriptor (0< or 0<<<), which the parser reads "
                "as an argument; write < or <<< alone")
    if _LONE_DOLLAR.search(marked):
        return ("a $ is followed by a blank or ends a line, which the parser reads differently "
                "from the shells (as $# before a comment); write '$' or \\$")
    if _ansi_c_quoting(root, marked):
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


_DELIMITER = re.compile(r"""-?\s*(?:([A-Za-z_][A-Za-z0-9_]*)|'([A-Za-z_][A-Za-z0-9_]*)'"""
                        r"""|"([A-Za-z_][A-Za-z0-9_]*)"|\\([A-Za-z_][A-Za-z0-9_]*))""")


def _ansi_c_quoting(root: Node, marked: str) -> bool:
    """Whether ``$'`` stands anywhere but inside single quotes (``grep '^$'`` is fine)."""
    source = marked.encode()
    for match in re.finditer(rb"\$'", source):
        node: Node | None = root.descendant_for_byte_range(match.start(), match.start() + 1)
        while node is not None and node.type not in ("raw_string", "comment"):
            node = node.parent
        if node is None or node.start_byte >= match.start():
            return True
    return False


def _heredoc_ends_cleanly(redirect: Node, marked: str) -> bool:
    """Whether the shells end this here-document exactly where tree-sitter says it does: its
    delimiter is a plain word (``EOF``, ``'EOF'``, ``"EOF"``, ``\\EOF``), its end is the
    first line that is exactly that word (tabs stripped for ``<<-``), and its body starts on
    the line after the operator's."""
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    end = next((c for c in redirect.children if c.type == "heredoc_end"), None)
    if start is None or end is None:
        return False
    operator = _text(redirect)[:3]
    written = (operator[2:] if operator == "<<-" else "") + _text(start)
    match = _DELIMITER.fullmatch(written.lstrip("-").strip()) if written else None
    if match is None:
        return False
    delimiter = next(g for g in match.groups() if g is not None)
    source = marked.encode()
    line_start = source.rfind(b"\n", 0, end.start_byte) + 1
    # Every line from the one after the operator's to the end line: the first that is
    # the delimiter must be tree-sitter's end line.
    first = source.find(b"\n", start.end_byte) + 1
    if first == 0 or first > line_start:
        return False
    for line in source[first:].split(b"\n"):
        text = line.decode("utf-8", "replace")
        if operator == "<<-":
            text = text.lstrip("\t")
        if text == delimiter:
            return first == line_start
        first += len(line) + 1
    return False


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
_SPLIT_REFUSAL = ("inside an unquoted $(…) standing as an argument, whose output the shell "
                  "splits into words")


def _what(kind: str) -> str:
    return f"in a place the check does not allow ({kind.replace('_', ' ')})"


class _Marker:
    """One marker: walks up the syntax tree from it and refuses what is not plain data."""

    def __init__(self, source: bytes, prefix: str, start: int, end: int) -> None:
        self.source = source
        self.prefix = prefix
        self.start = start
        self.end = end
        #: How the value is written in: ``bare`` (shell-quoted), ``double`` or ``single``.
        self.quoting: Quoting = "bare"
        self.in_expansion = False
        #: The output of a $(…) holding the marker is unquoted so far (split into words).
        self.split = False
        #: The template's functions, by name (see :meth:`check_template_readers`).
        self.functions: dict[str, Node] = {}

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
            elif kind == "string" and node.prev_sibling is not None and \
                    node.prev_sibling.type == "$" and node.prev_sibling.end_byte == node.start_byte:
                raise _Refused('inside $"…" quotes, which bash translates and dash does not have',
                               _QUOTE_ADVICE)
            elif kind in ("string", "raw_string"):
                # Inside "…" the value is escaped for double quotes, inside '…' for single
                # ones; the quotes nearest the marker (not those around a $(…) holding it)
                # decide. Inside ${…} the shells treat quotes differently: refused there.
                if output:
                    self.split = False
                elif self.in_expansion:
                    raise _Refused("inside quotes within ${…}, which the shells read "
                                   "differently", "write it bare: ${VAR:-{x}}")
                elif self.quoting == "bare":
                    self.quoting = "double" if kind == "string" else "single"
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
                    child.type == "variable_name" and child.start_byte < self.start and \
                    not output and node.parent is not None and node.parent.type != "string":
                pass  # `$v{x}`: the marker lengthens the name, the quoted value does not
            elif kind in ("simple_expansion", "special_variable_name"):
                raise _Refused("glued to a variable name ($NAME{x} reads one longer name); "
                               "write ${NAME}{x}")
            elif kind == "expansion":
                self.check_expansion(node, child)
                if not output:
                    if self.quoting != "bare":
                        raise _Refused("inside quotes within ${…}, which the shells read "
                                       "differently", "write it bare: ${VAR:-{x}}")
                    self.in_expansion = True
            elif kind in ("command_substitution", "process_substitution"):
                if _text(node).startswith("`"):
                    raise _Refused(*_BACKTICK_REFUSAL)
                raise _Refused(_what(kind))
            elif kind == "command_name":
                raise _Refused(*_NAME_REFUSAL)
            elif kind == "command":
                if child is None or child.type == "command_name":
                    raise _Refused(*_NAME_REFUSAL)
                if self.split:
                    raise _Refused(_SPLIT_REFUSAL, 'write it in double quotes: "$(…)"')
                if child.type == "variable_assignment":
                    raise _Refused("in an assignment (NAME={x} cmd), whose variable may be "
                                   "evaluated as arithmetic or as a name")
                self.check_command(node)
                self.climb_statement(node)
                return
            elif kind == "herestring_redirect":
                self.check_input_of(_owner_command(node), "in a here-string")
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
                        self.check_input_of(_owner_command(node), "the name of a file")
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
                if self.split:
                    raise _Refused(_SPLIT_REFUSAL, 'write it in double quotes: "$(…)"')
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
                raise _Refused("in an assignment (NAME={x}, NAME=$(… {x} …)), whose variable "
                               "may later be evaluated as arithmetic, a name or code",
                               "pass the value through env= and use \"$NAME\" as a plain "
                               "argument")
            elif kind in ("declaration_command", "unset_command"):
                word = _text(node).split(None, 1)[0]
                raise _Refused(f"an argument of {word}, which takes variable names and "
                               f"evaluates array subscripts in them (a[$(…)] runs)")
            elif kind == "case_item":
                raise _Refused("in a case pattern")
            elif kind == "case_statement":
                if child is None or _field(child) != "value":
                    raise _Refused("in a case statement other than its word")
                self.climb_statement(node)  # `case {x} in`: the word is matched, as data
                return
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
                if kind == "pipeline":
                    for later in current.named_children:
                        if later.start_byte >= child.end_byte:
                            self.check_piped_into(later)
            elif kind == "heredoc_redirect" and child.type not in _HEREDOC:
                pass  # tree-sitter nests the rest of the `<<EOF` line here
            elif kind == "compound_statement":
                if _text(current).startswith("(("):
                    raise _Refused("inside arithmetic ((…))")
            elif kind in ("command_substitution", "process_substitution"):
                if _text(current).startswith("`"):
                    raise _Refused(*_BACKTICK_REFUSAL)
                # The output of $(…) now stands where the $(…) is written; unquoted, it
                # would be split into words (a process substitution gives one file name).
                self.split = kind == "command_substitution"
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
        row = program_of(base)
        if base == "printf":
            self.check_printf(words)
        elif base in ("test", "["):
            if base == "[" and words and _literal(words[-1]) == "]":
                words = words[:-1]
            self.check_test(base, words)
        elif base == "find":
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
        return re.match(r"""["']?[A-Za-z_][A-Za-z0-9_]*=""", _text(word)) is not None \
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
            if re.match(r"""["']?[A-Za-z_][A-Za-z0-9_]*=""", text) is None:
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
            if base == "find" or (row is not None and row.runs not in ("names", "options")):
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
                        "or pass the text through stdin=")

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
                if base == "xargs" and (program_of(program) is not None
                                        or program.rsplit("/", 1)[-1] == "find"):
                    why = getattr(program_of(program), "why", "runs what -exec names")
                    raise _Refused(f"{how} that xargs turns into arguments of {program}, which "
                                   f"{why}")
                if base != "xargs":
                    self.check_reader(program.rsplit("/", 1)[-1], rest, how)
                if certain:
                    return
            raise self.stdin_refusal(how, base)
        if row.runs == "names" and not how.startswith("the name"):
            raise _Refused(f"a here-string read by {base}, which assigns it to a variable "
                           f"(like NAME={{x}})")
        if row.runs == "subcommand" and self.running_subcommand(row, words) is None:
            return  # docker login --password-stdin: a subcommand that reads data
        if row.runs in ("code", "names", "program", "subcommand") or \
                not self.has_program_text(base, row, words):
            raise self.stdin_refusal(how, base)

    def wrapped_candidates(self, name: str, row: Program,
                           words: list[Node]) -> Iterator[tuple[str, list[Node], bool]]:
        """The words a wrapper may run as its program, with their arguments, and whether
        each is certainly the program (it is not right after an option that may take it).
        Stops at a word that is not literal. Where the row lists the options that take an
        argument (``nice -n 5``), the program is always certain."""
        precise = bool(row.arg_options)
        after_option = skip = False
        leading = row.leading
        for i, word in enumerate(words):
            lit = _literal(word)
            if lit is None or self.hostile(word):
                return
            if skip:  # the argument of the option before
                skip = False
                continue
            if _is_code_option(lit, row):
                return  # env -S 'sh -c': a command line of its own
            if lit.startswith("-") or (name == "env" and "=" in lit):
                after_option = lit.startswith("-") and not precise
                skip = precise and lit in row.arg_options
                continue
            if leading > 0 and not after_option:
                leading -= 1
                continue
            certain = not after_option or name in _PLAIN_WRAPPERS
            yield lit, words[i + 1:], certain
            if certain:
                return
            after_option = False

    def has_program_text(self, name: str, row: Program, words: list[Node]) -> bool:
        """Whether a shell or interpreter is given its program literally (``sh -c '…'``,
        ``python3 script.py``), so standard input is data to it. Interactive options
        (``python3 -i``, ``node -i``) and modules that read code (``python3 -m code``) make
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
            if lit in row.code_options or (row.runs == "shell" and lit.startswith("-")
                                            and "c" in lit[1:] and not lit.startswith("--")):
                given = words[i + 1] if i + 1 < len(words) else None
                if lit == "-m" and given is not None and _literal(given) in CODE_MODULES:
                    return False
                return data(given) and not interactive
            if lit in row.arg_options:
                i += 2
                continue
            if lit == "--":
                return data(words[i + 1] if i + 1 < len(words) else None) and not interactive
            if lit.startswith(("-", "+")) and not reads_stdin(lit):
                if row.runs == "shell" and "s" in lit[1:] and not lit.startswith("--"):
                    return False  # sh -s: the script is standard input
                i += 1
                continue
            return not reads_stdin(lit) and not interactive
        return False

    def check_program_text(self, name: str, row: Program, words: list[Node]) -> None:
        """``sed``/``awk``/``perl -e``/``python -c``…: their program text is code (sed's
        ``e``, awk's ``system()``): placeholders only after it, as data, never in it or in
        an option. GNU sed takes options anywhere (even after its script), and perl, node
        or gawk read options after program text given with ``-e``/``-f``: there a
        placeholder must follow ``--``. perl's ``-n``/``-p`` loop opens a file name ending
        in ``|`` as a command: no placeholder at all then."""
        code_opts, arg_opts = row.code_options, row.arg_options
        anywhere = name == "sed"
        refusal = _Refused(f"an option or the program text of {name}, which {row.why}",
                           f"write {name}'s program literally and pass the value after it"
                           + (" and after --" if anywhere else "") + ", or through env= or stdin=")
        if row is PROGRAMS["perl"] and any(
                re.fullmatch(r"-[a-zA-Z]*[np][a-zA-Z]*", _literal(w) or "") for w in words):
            raise _Refused(f"an argument of {name} -n or -p, whose loop opens a file name "
                           f"ending in | as a command", "pass the value through env= or stdin=")
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
            if lit in code_opts or lit in arg_opts:
                given = words[i + 1] if i + 1 < len(words) else None
                if given is not None and lit in row.variable_options and \
                        self.variable_value(given):
                    i += 2  # awk -v n={x}: a variable, data
                    continue
                if given is None or self.hostile(given) or _literal(given) is None:
                    raise refusal
                if lit in code_opts:
                    program = via_option = True
                i += 2
                continue
            if not lit.startswith("-") or lit == "-":
                program = True  # the program text or script file, written literally
                via_option = False
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
            if lit in row.arg_options:
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
        raise _Refused(f"the script of {name}, which {row.why}")

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

    def check_subcommand(self, name: str, row: Program, words: list[Node]) -> None:
        """``uv run``, ``npm exec``, ``docker compose run``…: where a subcommand that runs a
        program appears anywhere (options and their arguments may come first: ``npm
        --prefix . exec``), no placeholder may; nor may one choose the subcommand. Other
        subcommands' arguments are data."""
        running = self.running_subcommand(row, words)
        if running is not None and name in ("pip", "pip3") and all(
                _PINNED.match(_text(w)) for w in words if self.hostile(w)):
            return  # pip install "tool=={v}": the value picks a version of a named package
        if running is not None:
            raise _Refused(f"an argument of {name} {running}, which {row.why}",
                           "pass the value through env= (and use \"$VAR\") or stdin=")
        for word in words:
            lit = _literal(word)
            if self.hostile(word) or lit is None:
                raise _Refused(f"an argument of {name} where it could be the subcommand, and "
                               f"{name} {row.why}", "write the subcommand literally first")
            if not lit.startswith("-"):
                return

    def running_subcommand(self, row: Program, words: list[Node]) -> str | None:
        """The first word of ``words`` that is one of the row's program-running
        subcommands, or ``None``."""
        return next((lit for w in words if (lit := _literal(w)) in row.subcommands), None)

    def check_options(self, name: str, row: Program, words: list[Node]) -> None:
        """``git``/``tar``/``rsync``…: a value that starts a word could start with ``-`` and
        become one of the options that run a program; it must follow ``--`` (or an option
        that takes it as its value, ``git commit -m {x}``)."""
        previous: str | None = None
        first = _subcommand(row, words)
        for word in words:
            lit = _literal(word)
            if lit in row.runs_after:
                raise _Refused(f"after {name} … {lit}, which runs the rest as a command",
                               "pass the value through env= (and use \"$VAR\")")
            if lit in ("--", "--end-of-options"):
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
                    risky = text.startswith((self.prefix, "$")) and not (
                        previous in row.value_options
                        or f"{first}:{previous}" in row.value_options
                        or (name == "tar" and _tar_bundle_takes(previous) in ("f", "C")))
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


def _subcommand(row: Program, words: list[Node]) -> str | None:
    """The first word that is neither an option nor the argument of one (``git -C dir
    checkout`` → ``checkout``)."""
    skip = False
    for word in words:
        lit = _literal(word)
        if skip:
            skip = False
            continue
        if lit is None:
            return None
        if lit.startswith("-"):
            skip = lit in row.arg_options
            continue
        return lit
    return None


def _tar_bundle_takes(word: str | None) -> str | None:
    """Which option of a tar option bundle (``czf``, ``-cIf``) takes the next word: the
    first of its letters that takes an argument; ``None`` when none does."""
    if word is None or word.startswith("--") or not re.fullmatch(r"-?[A-Za-z]+", word):
        return None
    return next((c for c in word.lstrip("-") if c in "bCfFgHIKLNTVX"), None)


def _is_code_option(word: str, row: Program) -> bool:
    """Whether ``word`` is one of the row's code options, also glued to its value or in a
    cluster of short options (``-S'sh -c'``, ``-iS``, ``--split-string=…``)."""
    if word.split("=", 1)[0] in row.code_options:
        return True
    if word.startswith("-") and not word.startswith("--"):
        shorts = {o[1] for o in row.code_options if len(o) == 2}
        return any(letter in shorts for letter in word[1:])
    return False


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
