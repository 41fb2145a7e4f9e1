"""Template-wide reasons no placeholder of a shell command can be trusted: blanks and
line continuations the shells and the parser read differently, aliases, keyword mode,
bash-only syntax, ``$'…'``, ``_``, brace expansion, here-documents whose end is unsure.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

from brain.shell_check.syntax import _literal, _parser, _text, _walk

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tree_sitter import Node

_HEREDOC_OPERATOR = re.compile(r"(?<!<)<<(?!<)")

_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")

# [[ … ]], ((…)) (not $((…))), $[…], a[…]=, ${v/pattern/…}: bash-only, and dash or
# tree-sitter read them differently from bash.
_BASH_ONLY = re.compile(r"\[\[|(?<!\$)\(\(|\$\[|[\w\]]\[[^\]\n]*\]\+?=|\$\{[#!]?\w+//?")

_SET_DYNAMIC = re.compile(r"(?<![\w-])set(?![\w-])[^;&|\n]*[$`]")

_NUMBERED_INPUT = re.compile(r"(?:^|[\s;&|(){}])\d+<")

# A `$` that is not part of `$$` (the shell's pid), before a blank or at the end.
_LONE_DOLLAR = re.compile(r"(?<!\$)(?:\$\$)*\$(?=\s|$)")

_SET_KEYWORD = re.compile(r"(?<![\w-])set(?![\w-])[^;&|\n]*(?:\s[-+][a-zA-Z]*k|keyword)")

_UNDERSCORE = re.compile(r"(?<![\w$])_(?!\w)")

_DOLLAR_UNDERSCORE = re.compile(r"\$_(?!\w)|\$\{[#!]?_(?!\w)")

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

def _quoted_text_hidden(root: Node, marked: str) -> str:
    """``marked`` with the literal text inside quotes (``'…'``, and the plain parts of
    ``"…"``) replaced by ``x``: what may be shell syntax, for the checks that read text.
    A command substitution inside ``"…"`` stays, as it is code."""
    source = bytearray(marked.encode())
    for node in _walk(root):
        if node.type == "string_content":
            start, end = node.start_byte, node.end_byte
        elif node.type == "raw_string":
            start, end = node.start_byte + 1, node.end_byte - 1
        else:
            continue
        source[start:end] = b"x" * (end - start)
    return source.decode(errors="replace")


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
    if _NUMBERED_INPUT.search(_quoted_text_hidden(root, marked)):
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
