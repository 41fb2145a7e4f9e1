"""The ``code`` aspect of a ``@step``'s fingerprint (SPEC §24): a digest of what its
function does, read from the objects Python made of its module.

The walk starts at the function ``@step`` was given (a decorator's wrapper, when a decorator
sits under ``@step``) and follows, transitively, what that code may run that its module
defines:

- a function: its instructions (``dis``: no line numbers, no ``NOP``, jumps and exception
  handlers by position among the instructions kept, locals by slot so renaming one is no
  change, constants by value and nested code by its own instructions, so no docstring
  counts), its parameters' names and kinds, its default values and annotations (plain
  data by value, code by its own digest), the functions and classes its closure holds,
  what it wraps (``__wrapped__``), and the functions and classes of its module it loads as
  *globals* (``LOAD_GLOBAL``/``LOAD_NAME``: ``'a b'.split()`` loads no global ``split``);
- a class: its bases (their classes of the same module walked in turn: the inherited
  methods), its methods, static and class methods, properties and other descriptors
  holding a function (``functools.cached_property``...), nested classes, annotations and
  plain-data attributes.

A function or class of another module counts by its name only (its code is that module's,
which the fingerprint does not cover). What a global *value* holds is not followed. The
result is the same in every process and under any hash seed, whether the file is imported
or loaded by ``brain worker``: no address, path, line or module name of the file goes in.
"""

from __future__ import annotations

import bisect
import dis
import enum
import hashlib
import json
import types
import typing
from collections.abc import Callable
from typing import Any

#: Instructions that change nothing a function does: line events and argument prefixes.
_SKIPPED = frozenset({"NOP", "EXTENDED_ARG", "CACHE"})
_JUMPS = frozenset({*dis.hasjrel, *dis.hasjabs, *getattr(dis, "hasjump", ())})
_LOCALS = frozenset({*dis.haslocal, *dis.hasfree})
_CONSTS = frozenset(dis.hasconst)
#: The loads that read a module's globals (an attribute load reads the object's own).
_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
#: ``co_flags`` bits that change how a function runs (varargs, generator, coroutine...);
#: the rest say how it was compiled (nested, has a docstring on 3.14...).
_FLAGS = 0x4 | 0x8 | 0x20 | 0x80 | 0x100 | 0x200
_DEPTH = 16


def code_digest(obj: Callable[..., Any] | type) -> str:
    """A digest of what ``obj`` (a ``@step``'s function, or a pydantic model's class) does:
    see the module."""
    inner = obj
    for _ in range(32):
        nxt = getattr(inner, "__wrapped__", None)
        if nxt is None or nxt is inner:
            break
        inner = nxt
    module: str | None = inner.__module__ if isinstance(inner, type) else \
        getattr(inner, "__globals__", {}).get("__name__", getattr(inner, "__module__", None))
    return _Walk(module).digest(obj)


class _Walk:
    """One walk from one root: every object met gets a number, in the order met (the same
    in every process), and stands for itself by that number where another refers to it."""

    def __init__(self, module: str | None) -> None:
        self.module = module
        self.numbers: dict[int, int] = {}
        self.objects: list[Any] = []

    def digest(self, root: Any) -> str:
        self.ref(root)
        entries = []
        i = 0
        while i < len(self.objects):
            entries.append(self.entry(self.objects[i]))
            i += 1
        text = json.dumps(entries, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def ref(self, obj: Any) -> list[Any]:
        if id(obj) not in self.numbers:
            self.numbers[id(obj)] = len(self.objects)
            self.objects.append(obj)
        return ["ref", self.numbers[id(obj)]]

    def ours(self, obj: Any) -> bool:
        """Whether a function or class was defined by the root's module (a function by its
        globals: ``functools.wraps`` copies ``__module__`` onto a wrapper from elsewhere)."""
        if isinstance(obj, type):
            return obj.__module__ == self.module
        return getattr(obj, "__globals__", {}).get("__name__") == self.module

    # --- entries -----------------------------------------------------------------------

    def entry(self, obj: Any) -> list[Any]:
        wrapped = getattr(obj, "__wrapped__", None)
        inner = self.ref(wrapped) if wrapped is not None and wrapped is not obj else None
        if isinstance(obj, types.FunctionType) and self.ours(obj):
            return [*self.function(obj), inner]
        if isinstance(obj, type) and self.ours(obj):
            return self.klass(obj)
        code = getattr(obj, "__code__", None)
        name = code.co_qualname if isinstance(code, types.CodeType) and hasattr(
            code, "co_qualname") else getattr(obj, "__qualname__", None)
        if isinstance(obj, type):
            name = f"{obj.__module__}.{obj.__qualname__}"
        return ["outside", type(obj).__qualname__, str(name), inner]

    def function(self, fn: types.FunctionType) -> list[Any]:
        code = fn.__code__
        found = fn.__globals__
        links = []
        for name in sorted(_global_names(code)):
            link = self.code_link(found.get(name))
            if link is not None:
                links.append([name, link])
        cells = [self.cell(c) for c in fn.__closure__ or ()]
        annotations = getattr(fn, "__annotations__", None) or {}
        return ["function", self.code(code), self.value(fn.__defaults__),
                self.value(fn.__kwdefaults__), self.value(dict(annotations)), cells, links]

    def klass(self, cls: type) -> list[Any]:
        members = []
        for name, member in sorted(vars(cls).items()):
            held = self.member(member)
            if held is not None:
                members.append([name, held])
            elif name == "__annotations__" and isinstance(member, dict):
                members.append([name, self.value(member)])
            elif not (name.startswith("__") and name.endswith("__")):
                members.append([name, self.value(member)])
        return ["class", cls.__name__, [self.ref(b) for b in cls.__bases__], members]

    def member(self, member: Any) -> Any:
        """What a class attribute that holds code is (``None`` for data)."""
        if isinstance(member, (staticmethod, classmethod)):
            return [type(member).__name__, self.value(member.__func__)]
        if isinstance(member, property):
            return ["property", [self.value(f) for f in (member.fget, member.fset, member.fdel)]]
        if isinstance(member, (types.FunctionType, type)) or hasattr(member, "__wrapped__"):
            return self.ref(member)
        for attr in ("func", "fget"):  # cached_property, partialmethod, singledispatchmethod
            held = getattr(member, attr, None)
            if isinstance(held, types.FunctionType):
                return [type(member).__qualname__, self.ref(held)]
        return None

    def code_link(self, obj: Any) -> Any:
        """A global or a closure's value, when it is code (else ``None``: values of globals
        are not covered)."""
        if isinstance(obj, (types.FunctionType, type)):
            return self.ref(obj)
        if callable(obj) and getattr(obj, "__wrapped__", None) is not None:
            return self.ref(obj)  # lru_cache and other wrappers around a function
        return None

    def cell(self, cell: Any) -> Any:
        try:
            content = cell.cell_contents
        except ValueError:
            return "<empty>"
        link = self.code_link(content)
        if link is not None:
            return link
        if content is None or isinstance(content, (str, bytes, int, float, complex, bool)):
            return repr(content)
        return f"<{type(content).__qualname__}>"  # mutable state: by its type alone

    # --- code and values ---------------------------------------------------------------

    def code(self, code: types.CodeType) -> list[Any]:
        kept = [i for i in dis.get_instructions(code) if i.opname not in _SKIPPED]
        offsets = [i.offset for i in kept]

        def at(offset: int) -> int:  # the position of the first instruction kept from there
            return bisect.bisect_left(offsets, offset)

        out: list[Any] = []
        for i in kept:
            if i.opcode in _JUMPS:
                arg: Any = ["to", at(i.argval)]
            elif i.opcode in _CONSTS:
                arg = self.value(i.argval)
            elif i.opcode in _LOCALS:
                arg = i.arg
            else:
                arg = i.argrepr or i.arg
            if i.opname == "STORE_NAME" and i.argval == "__doc__" and out \
                    and out[-1][0] == "LOAD_CONST":
                out[-1] = ["DOC"]  # a class body's docstring
                continue
            out.append([i.opname, arg])
        handlers = [[at(e.start), at(e.end), at(e.target), e.depth, e.lasti]
                    for e in getattr(dis.Bytecode(code), "exception_entries", ())]
        params = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x4) \
            + bool(code.co_flags & 0x8)
        return [out, handlers, list(code.co_varnames[:params]), code.co_argcount,
                code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags & _FLAGS]

    def value(self, value: Any, depth: int = 0) -> Any:
        """A value as stable data: plain data by value (sets and dicts sorted), code by
        reference, anything else by its type (never a repr with an address)."""
        if depth > _DEPTH:
            return "<deep>"
        if value is None or isinstance(value, (str, int, float, bool, bytes, complex)) \
                or value is Ellipsis:
            return repr(value)
        if isinstance(value, types.CodeType):
            return ["code", self.code(value)]
        if isinstance(value, enum.Enum):
            return ["enum", type(value).__qualname__, value.name]
        if typing.get_origin(value) is not None:  # list[int], Optional[M], Annotated[...]
            return ["generic", self.value(typing.get_origin(value), depth + 1),
                    [self.value(a, depth + 1) for a in typing.get_args(value)]]
        if isinstance(value, (tuple, list)):
            return [type(value).__name__, [self.value(v, depth + 1) for v in value]]
        if isinstance(value, (set, frozenset)):
            return ["set", sorted(_text(self.value(v, depth + 1)) for v in value)]
        if isinstance(value, dict):
            return ["dict", sorted([_text(self.value(k, depth + 1)), self.value(v, depth + 1)]
                                   for k, v in value.items())]
        link = self.code_link(value)
        if link is not None:
            return link
        if type(value).__module__ == "typing":
            return ["typing", repr(value)]  # typing.Any, a TypeVar
        return f"<{type(value).__qualname__}>"


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the code nested in it load as globals."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_LOADS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
