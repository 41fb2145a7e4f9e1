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

``stdin=`` holding a placeholder is judged by :func:`stdin_problem` (with
:mod:`.step_input`): every command that may read the step's standard input must read
it as data, never as its program (``sh``, ``python3 -``, ``cat | sh``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from functools import lru_cache

from brain import placeholders
from brain._errors import PlaceholderError
from brain.placeholders import Quoting
from brain.shell_check.marker import _Marker
from brain.shell_check.step_input import script_problem
from brain.shell_check.syntax import (
    _ADVICE,
    _first_error,
    _join_continuations,
    _parser,
    _Refused,
)
from brain.shell_check.template import (
    _HEREDOC_OPERATOR,
    _continuation_not_joined,
    _global_problem,
    _odd_blank,
)


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
    return _check(_argv_command(words))[0]


def stdin_problem(program: str | Sequence[str], stdin: str) -> str | None:
    """Why ``stdin`` text holding placeholders may not be fed to ``program`` (a
    ``shell(command=...)`` text, or ``argv`` words), or ``None``: a value must never become
    code, so every command that may read the step's standard input must read it as data
    (``cat``, ``wc``, ``jq .``, ``python3 job.py``), not as its program (``sh``,
    ``python3 -``, ``env node``, ``cat | sh``, ``bash -c 'perl'``).

    >>> stdin_problem(["jq", "."], "{params.doc}") is None
    True
    >>> print(stdin_problem("cat | sh", "{params.note}"))  # doctest: +ELLIPSIS
    placeholder {params.note} is in stdin= text that sh reads from standard input, ...
    """
    refs = [p for p in placeholders.parse(stdin) if isinstance(p, placeholders.Ref)]
    if not refs:
        return None
    first = refs[0].text
    # The command's own placeholders become marker words: a command they name is unknown.
    words = [program] if isinstance(program, str) else list(program)
    pieces = [placeholders.parse(w) for w in words]
    prefix = "_brainph"
    while any(prefix in p for w in pieces for p in w if isinstance(p, str)):
        prefix += "x"

    def marked_word(parts: tuple[placeholders.Part, ...]) -> str:
        quote = shlex.quote if not isinstance(program, str) else str
        return "".join(quote(p) if isinstance(p, str) else f"{prefix}{i}_"
                       for i, p in enumerate(parts)) or "''"

    marked = " ".join(map(marked_word, pieces))
    problem = script_problem(marked)
    if problem is not None:
        return (f"placeholder {first} is in stdin= text, and the command {problem}; "
                f"{_STDIN_ADVICE}")
    root = _parser().parse(_join_continuations(marked).encode()).root_node
    try:
        _Marker(marked.encode(), prefix, 0, 0).check_readers_in(root, "in stdin= text")
    except _Refused as exc:
        return f"placeholder {first} is {exc.context}; {_STDIN_ADVICE}"
    except RecursionError:
        return f"placeholder {first} is in stdin= text fed to a command nested too deeply to " \
               f"be checked; {_STDIN_ADVICE}"
    return None


_STDIN_ADVICE = ("a value must never become code: feed stdin= to a program that reads it as "
                 "data (cat, jq ., python3 job.py), or pass the value through env= to a script "
                 "file that reads it (argv=['sh', 'job.sh'], env={'NOTE': ...})")


def _argv_command(words: Sequence[str]) -> str:
    """``argv`` words as the shell command that runs the same: each literal piece quoted
    (a ``{{x}}`` escape kept an escape), each placeholder bare."""
    return " ".join(
        "".join(placeholders.escape(shlex.quote(p)) if isinstance(p, str) else p.text
                for p in placeholders.parse(w))
        or "''" for w in words)


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


def _with_markers(command: str, parts: tuple[placeholders.Part, ...]
                  ) -> tuple[str, str, list[placeholders.Ref]]:
    """The command with a unique marker where each placeholder stands: ``(prefix, marked
    text, refs)``; :class:`_Problem` for what no marker can be judged in (odd blanks,
    continuations the shells do not join, here-documents with continuations)."""
    prefix = "_brainph"
    joined_command = _join_continuations(command)
    while prefix in command or prefix in joined_command:
        prefix += "x"
    pieces: list[str] = []
    refs: list[placeholders.Ref] = []
    for part in parts:
        if isinstance(part, placeholders.Ref):
            pieces.append(f"{prefix}{len(refs)}_")
            refs.append(part)
        else:
            pieces.append(part)
    marked = "".join(pieces)
    first = refs[0].text
    blank = _odd_blank(marked)
    if blank:
        raise _Problem(f"the command has placeholders (first {first}) and {blank}, which the "
                       f"shells and the check could read differently; use plain spaces and "
                       f"newlines, or pass the values through env= or stdin=")
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
    return prefix, marked, refs


def _quoting(command: str, parts: tuple[placeholders.Part, ...]) -> tuple[Quoting, ...]:
    """How each placeholder is written in (bare, in "…" or in '…'), or :class:`_Problem`."""
    prefix, marked, refs = _with_markers(command, parts)
    first = refs[0].text
    # The shells join a backslash-newline before anything else: judge the joined text, so
    # what the joining glues together is judged together.
    marked = _join_continuations(marked)
    source = marked.encode()
    markers = [f"{prefix}{i}_".encode() for i in range(len(refs))]
    if any(source.count(m) != 1 for m in markers):
        raise _Problem(f"placeholder {first} cannot be checked: the command's text reads like "
                       f"the check's own markers; {_ADVICE}")
    spans = [(ref, source.find(m), source.find(m) + len(m))
             for ref, m in zip(refs, markers, strict=True)]
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
