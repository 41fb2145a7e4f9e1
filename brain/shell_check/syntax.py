"""The shell parser and what the check reads off its syntax tree: words, literals,
fields, the commands a redirection belongs to. Pure functions of the tree.

tree-sitter is imported lazily, only for a command that has placeholders, so
``import brain`` stays light.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tree_sitter import Node, Parser

_ADVICE = ("write it as a separate argument of a command (e.g. printf '%s\\n' {x}), or pass the "
           "value through env= (and use \"$VAR\") or stdin=")

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

_CONTINUATION = re.compile(r"(\\+)\n")

def _join_continuations(text: str) -> str:
    """``text`` with every backslash-newline line continuation removed (an even run of
    backslashes before a newline is escaped backslashes, and stays)."""
    def join(m: re.Match[str]) -> str:
        run = m.group(1)
        return run[:-1] if len(run) % 2 else m.group(0)

    return _CONTINUATION.sub(join, text)

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

_GLOB = re.compile(r"[*?\[]")

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
