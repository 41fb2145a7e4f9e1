"""How npm reads its subcommand: the names, aliases and typos it accepts, and any
unambiguous abbreviation of them (``npm instal``, ``npm exe``, ``npm installTest``), as
npm's own ``lib/utils/cmd-list.js`` does. The table (:mod:`.programs`) names npm's
program-running subcommands by their canonical names; :func:`npm_command` maps what was
written onto one.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: npm 11's commands (``lib/utils/cmd-list.js``).
COMMANDS = frozenset("""
access adduser approve-scripts audit bugs cache ci completion config dedupe deny-scripts
deprecate diff dist-tag docs doctor edit exec explain explore find-dupes fund get help
help-search init install install-ci-test install-scripts install-test link ll login logout
ls org outdated owner pack ping pkg prefix profile prune publish query rebuild repo restart
root run sbom search set shrinkwrap stage star stars start stop team test token trust
undeprecate uninstall unpublish unstar update version view whoami
""".split())

#: Its aliases, short names and typos, by what they stand for.
ALIASES = {
    "author": "owner", "home": "docs", "issues": "bugs", "info": "view", "show": "view",
    "find": "search", "add": "install", "unlink": "uninstall", "remove": "uninstall",
    "rm": "uninstall", "r": "uninstall", "un": "uninstall", "rb": "rebuild", "list": "ls",
    "ln": "link", "create": "init", "i": "install", "it": "install-test",
    "cit": "install-ci-test", "u": "update", "up": "update", "c": "config", "s": "search",
    "se": "search", "tst": "test", "t": "test", "ddp": "dedupe", "v": "view",
    "run-script": "run", "clean-install": "ci", "clean-install-test": "install-ci-test",
    "x": "exec", "why": "explain", "la": "ll", "verison": "version", "ic": "ci",
    "innit": "init", "in": "install", "ins": "install", "inst": "install", "insta": "install",
    "instal": "install", "isnt": "install", "isnta": "install", "isntal": "install",
    "isntall": "install", "install-clean": "ci", "isntall-clean": "ci", "hlep": "help",
    "dist-tags": "dist-tag", "upgrade": "update", "udpate": "update", "rum": "run",
    "sit": "install-ci-test", "urn": "run", "ogr": "org", "add-user": "adduser",
}


@lru_cache(maxsize=256)
def npm_command(word: str) -> str | None:
    """The npm command ``word`` runs, or ``None`` when npm knows no such command.

    >>> npm_command("isntall"), npm_command("rum"), npm_command("explo"), npm_command("zzz")
    ('install', 'run', 'explore', None)
    """
    if re.search(r"[A-Z]", word):  # installTest is install-test
        word = re.sub(r"[A-Z]", lambda m: "-" + m.group().lower(), word)
    if word in COMMANDS:
        return word
    if word in ALIASES:
        return ALIASES[word]
    # An abbreviation: a prefix of exactly one name (npm's `abbrev`).
    names = [n for n in (*COMMANDS, *ALIASES) if n.startswith(word)] if word else []
    if len(names) != 1:
        return None
    return ALIASES.get(names[0], names[0])
