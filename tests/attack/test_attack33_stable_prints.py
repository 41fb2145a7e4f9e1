"""Attack (issue 33, SPEC §24): a step's fingerprint of the same file is the same in every
process, under any hash seed, whether the file is imported (``import flows``) or loaded by
``brain worker``/``brain serve``'s loader — else every resume would fail (or go on wrongly).
The file uses what could leak an order or an address: set and frozenset constants and
defaults, dataclasses, enums, NamedTuples, TypedDicts, pydantic models, lru_cache, for_each
and an env dict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLOW = '''
import dataclasses, enum, typing, functools
from pydantic import BaseModel
from brain import step, workflow, shell, for_each

KINDS = {"a", "b", "c", "d"}

class Color(enum.Enum):
    RED = 1
    BLUE = 2
    def label(self): return self.name.lower()

class Pt(typing.NamedTuple):
    x: int
    y: int = 0

@dataclasses.dataclass
class Cfg:
    n: int = 1
    tags: list = dataclasses.field(default_factory=list)
    def total(self): return self.n + len(self.tags)

class M(BaseModel):
    a: int = 0
    b: str = "x"
    def twice(self): return self.a * 2

class TD(typing.TypedDict):
    k: int

@functools.lru_cache
def cached(x): return x

def helper(s, opts=frozenset({"p", "q", "r", "s", "t"})):
    return s in opts or s in {"x", "y", "z", "w", "v"}

@step
def s(text: str) -> str:
    c = Cfg(); m = M(); p = Pt(1)
    d: TD = {"k": 1}
    return str((helper(text), c.total(), m.twice(), p.x, Color.RED.label(), d, cached(1),
                text in KINDS, {"u", "v", "w"}, frozenset({"m", "n", "o"})))

@workflow
def flow():
    with for_each(["a", "b"]) as it:
        s(it)
    shell("z", command="echo hi", env={"B": "1", "A": "2", "C": "3"})
'''

PROBE = '''
import sys
mode, folder = sys.argv[1], sys.argv[2]
if mode == "import":
    sys.path.insert(0, folder)
    import flows
    wf = flows.flow
else:
    from brain.loader import load_file
    wf = load_file(folder + "/flows.py")["flow"]
print(wf.definition_hash)
print(wf.fingerprint.text)
'''


def test_the_fingerprint_is_the_same_across_processes_seeds_and_ways_of_loading(
        tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    seen = set()
    for seed in ("0", "1", "12345", "random"):
        for mode in ("import", "load"):
            out = subprocess.run([sys.executable, "-c", PROBE, mode, str(tmp_path)],
                                 env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
                                 capture_output=True, text=True, timeout=60, check=True)
            seen.add(out.stdout)
    assert len(seen) == 1, seen
