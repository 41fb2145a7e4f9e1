"""One placeholder's marker, judged where it stands: the climb up the syntax tree from it.

:class:`_Marker` refuses what is not plain data where the value would land (a command
name, arithmetic, a here-document, ``$'…'``, ...), and notes how the value is written in
(bare, in "…" or in '…'); :class:`~brain.shell_check.arguments._Arguments` judges what the
command does with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from brain.placeholders import Quoting
from brain.shell_check.arguments import _Arguments
from brain.shell_check.syntax import (
    _EXPRESSIONS,
    _field,
    _flatten_test,
    _owner_command,
    _Refused,
    _text,
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






_HEREDOC = {"heredoc_body", "heredoc_content", "heredoc_redirect", "heredoc_start", "heredoc_end"}
_HEREDOC_REFUSAL = ("inside a here-document, where quotes are not removed and $(…) still runs",
                    "write it bare in the command or pass the text with stdin=")
_NAME_REFUSAL = ("the command name itself, so the value would choose the program to run",
                 "write the program literally and pass the value as an argument, or use argv=")
_BACKTICK_REFUSAL = ("inside backticks `…`, where backslashes and quotes are processed again",
                     "write it bare inside $(…) instead of backticks")
_SPLIT_REFUSAL = ("inside an unquoted $(…) standing as an argument, whose output the shell "
                  "splits into words")


def _quoted_text_at(root: Node, offset: int) -> bool:
    """Whether the byte at ``offset`` is plain text inside "…" or '…' (``"<b>{x}</b>"``),
    not an operator (``{x}>f``, ``"$(echo {x}>f)"``)."""
    node = root.descendant_for_byte_range(offset, offset + 1)
    return node is not None and (node.type == "raw_string" or (
        node.type == "string_content" and node.parent is not None
        and node.parent.type == "string"))


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
        if self.end < len(self.source) and self.source[self.end] in b"<>" \
                and not _quoted_text_at(root, self.end):
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
            for judge in (self._in_word, self._in_command, self._in_construct):
                verdict = judge(node, child, output)
                if verdict is not None:
                    break
            else:
                raise _Refused(_what(node.type))
            if verdict:  # the statement holding the value was judged: done
                return
            child, node = node, node.parent
        raise _Refused("outside any command")  # pragma: no cover - the root is a program

    def _in_word(self, node: Node, child: Node | None, output: bool) -> bool | None:
        """Words, quotes and expansions around the marker: ``False`` to climb on, ``None``
        when ``node`` is none of them."""
        kind = node.type
        if kind in ("word", "concatenation", "number", "regex", "extglob_pattern",
                    "string_content", "variable_name"):
            return False
        if kind == "string" and node.prev_sibling is not None and \
                node.prev_sibling.type == "$" and node.prev_sibling.end_byte == node.start_byte:
            raise _Refused('inside $"…" quotes, which bash translates and dash does not have',
                           _QUOTE_ADVICE)
        if kind in ("string", "raw_string"):
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
            return False
        if kind == "ansi_c_string":
            raise _Refused("inside $'…' quotes", _QUOTE_ADVICE)
        if kind == "translated_string":
            raise _Refused('inside $"…" quotes', _QUOTE_ADVICE)
        if kind == "comment":
            raise _Refused("in a comment, where a newline in the value would end the comment")
        if kind in _HEREDOC:
            raise _Refused(*_HEREDOC_REFUSAL)
        if kind == "simple_expansion" and child is not None and \
                child.type == "variable_name" and child.start_byte < self.start and \
                not output and node.parent is not None and node.parent.type != "string":
            return False  # `$v{x}`: the marker lengthens the name, the quoted value does not
        if kind in ("simple_expansion", "special_variable_name"):
            raise _Refused("glued to a variable name ($NAME{x} reads one longer name); "
                           "write ${NAME}{x}")
        if kind == "expansion":
            self.check_expansion(node, child)
            if not output:
                if self.quoting != "bare":
                    raise _Refused("inside quotes within ${…}, which the shells read "
                                   "differently", "write it bare: ${VAR:-{x}}")
                self.in_expansion = True
            return False
        if kind in ("command_substitution", "process_substitution"):
            if _text(node).startswith("`"):
                raise _Refused(*_BACKTICK_REFUSAL)
            raise _Refused(_what(kind))
        return None

    def _in_command(self, node: Node, child: Node | None, output: bool) -> bool | None:
        """A command, or a redirection of one, holding the marker: judged as a whole
        (``True``); ``None`` when ``node`` is none of them."""
        kind = node.type
        if kind == "command_name":
            raise _Refused(*_NAME_REFUSAL)
        if kind == "command":
            if child is None or child.type == "command_name":
                raise _Refused(*_NAME_REFUSAL)
            if self.split:
                raise _Refused(_SPLIT_REFUSAL, 'write it in double quotes: "$(…)"')
            if child.type == "variable_assignment":
                raise _Refused("in an assignment (NAME={x} cmd), whose variable may be "
                               "evaluated as arithmetic or as a name")
            self.check_command(node)
            self.climb_statement(node)
            return True
        if kind == "herestring_redirect":
            self.check_input_of(_owner_command(node), "in a here-string")
            self.climb_statement(node)
            return True
        if kind == "file_redirect":
            self._in_redirect(node, child)
            return True
        return None

    def _in_redirect(self, node: Node, child: Node | None) -> None:
        """The marker is the target of a redirection, or a word filed under one."""
        dests = [c for i, c in enumerate(node.children)
                 if node.field_name_for_child(i) == "destination"]
        if child is None or not dests:
            raise _Refused(_what(node.type))
        if dests[0].id == child.id:
            if any(c.type in ("<&", ">&", ">&-", "<&-") for c in node.children):
                raise _Refused("the target of >& or <&, which bash expands a second "
                               "time when it is not a descriptor number",
                               "write > {x} (or &> {x}) to send output to a file")
            if any(c.type in ("<", "<>") for c in node.children):
                self.check_input_of(_owner_command(node), "the name of a file")
            self.climb_statement(node)
            return
        # tree-sitter files the words after a redirection under it: they are arguments of
        # the command.
        cmd = _owner_command(node)
        if cmd is None:
            raise _Refused(_what("redirection of a compound command"))
        self.check_command(cmd)
        self.climb_statement(cmd)

    def _in_construct(self, node: Node, child: Node | None, output: bool) -> bool | None:
        """Tests, arithmetic, assignments, case, for and functions: judged (``True``) or
        refused; ``None`` when ``node`` is none of them."""
        kind = node.type
        if kind == "test_command" or kind in _EXPRESSIONS:
            self._in_test(node)
            return True
        if kind in ("arithmetic_expansion", "c_style_for_statement") or (
                kind == "compound_statement" and _text(node).startswith("((")):
            raise _Refused("inside arithmetic ($((…)), ((…))), which evaluates the value "
                           "as an expression (a[$(…)] runs)")
        if kind == "subscript":
            raise _Refused("in an array subscript, which bash evaluates as arithmetic")
        if kind in ("variable_assignment", "variable_assignments"):
            raise _Refused("in an assignment (NAME={x}, NAME=$(… {x} …)), whose variable "
                           "may later be evaluated as arithmetic, a name or code",
                           "pass the value through env= and use \"$NAME\" as a plain "
                           "argument")
        if kind in ("declaration_command", "unset_command"):
            word = _text(node).split(None, 1)[0]
            raise _Refused(f"an argument of {word}, which takes variable names and "
                           f"evaluates array subscripts in them (a[$(…)] runs)")
        if kind == "case_item":
            raise _Refused("in a case pattern")
        if kind == "case_statement":
            if child is None or _field(child) != "value":
                raise _Refused("in a case statement other than its word")
            self.climb_statement(node)  # `case {x} in`: the word is matched, as data
            return True
        if kind == "for_statement":
            raise _Refused("in the word list of a for loop (it is assigned to the loop "
                           "variable)")
        if kind == "function_definition":
            raise _Refused("the name of a function")
        return None

    def _in_test(self, node: Node) -> None:
        """The marker is an operand of ``[ … ]`` (or inside ``[[ … ]]`` or arithmetic)."""
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





































