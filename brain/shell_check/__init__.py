"""Where a placeholder may stand in a ``shell(command=...)`` template (SPEC §3, shell safety).

Values are inserted shell-quoted (``shlex.quote``) where they stand bare, escaped
for their quotes inside ``"…"`` or ``'…'``, which keeps them plain data only in
some places. The places are decided by a real shell parser
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

The parts: this module walks up the syntax tree from each marker (where the value
lands); :mod:`.arguments` judges what a command does with its words and input, by
the table of :mod:`.programs`; :mod:`.template` finds what makes a whole template
untrustworthy; :mod:`.syntax` holds the parser and the tree helpers. The parser is
imported lazily, only for a command that has placeholders, so ``import brain``
stays light.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from brain import placeholders
from brain._errors import PlaceholderError
from brain.placeholders import Quoting
from brain.shell_check.arguments import _Arguments
from brain.shell_check.syntax import (
    _ADVICE,
    _EXPRESSIONS,
    _field,
    _first_error,
    _flatten_test,
    _join_continuations,
    _owner_command,
    _parser,
    _Refused,
    _text,
)
from brain.shell_check.template import (
    _HEREDOC_OPERATOR,
    _continuation_not_joined,
    _global_problem,
    _odd_blank,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tree_sitter import Node

_QUOTE_ADVICE = "write it bare or inside plain \"…\" or '…' quotes: its value is escaped for you"

# `${v:-x}` and friends: the word after the operator is plain data once quoted.
_EXPANSION_OPS = {"-", ":-", "+", ":+", "?", ":?", "#", "##", "%", "%%"}
# Node types a command (a statement) may sit in.
_STATEMENT_PARENTS = {
    "program", "list", "pipeline", "redirected_statement", "subshell", "if_statement",
    "elif_clause", "else_clause", "while_statement", "do_group", "for_statement",
    "c_style_for_statement", "case_item", "case_statement", "function_definition",
    "negated_command",
}






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




























_HEREDOC = {"heredoc_body", "heredoc_content", "heredoc_redirect", "heredoc_start", "heredoc_end"}
_HEREDOC_REFUSAL = ("inside a here-document, where quotes are not removed and $(…) still runs",
                    "write it bare in the command or pass the text with stdin=")
_NAME_REFUSAL = ("the command name itself, so the value would choose the program to run",
                 "write the program literally and pass the value as an argument, or use argv=")
_BACKTICK_REFUSAL = ("inside backticks `…`, where backslashes and quotes are processed again",
                     "write it bare inside $(…) instead of backticks")
_SPLIT_REFUSAL = ("inside an unquoted $(…) standing as an argument, whose output the shell "
                  "splits into words")


def _what(kind: str) -> str:
    return f"in a place the check does not allow ({kind.replace('_', ' ')})"


class _Marker(_Arguments):
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





































