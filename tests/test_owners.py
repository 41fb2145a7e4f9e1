"""Lease owners: a dead or zombie local process is gone; a live one or another host's is not."""

from __future__ import annotations

import os
import socket
import subprocess
import time

from brain._owners import local_owner_gone, new_owner

HERE = new_owner().split(":")[0]  # this host name, this boot and process namespace


def test_a_live_process_is_not_gone() -> None:
    assert not local_owner_gone(new_owner())


def test_a_zombie_is_gone() -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # exited, not yet reaped: a zombie
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.01)
        os.kill(child.pid, 0)  # the pid still answers signals
        assert local_owner_gone(f"{HERE}:{child.pid}:abcd1234")
    finally:
        child.wait()
    assert local_owner_gone(f"{HERE}:{child.pid}:abcd1234")


def test_another_hosts_owner_or_garbage_is_not_judged() -> None:
    assert not local_owner_gone(f"not-{socket.gethostname()}:1:abcd1234")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert local_owner_gone(f"{HERE}:{dead.pid}:abcd1234")
    # The same host name elsewhere (a cloned machine, a container with the host's network,
    # an owner written by an older version): its process ids mean nothing here.
    for other in (socket.gethostname(), f"{socket.gethostname()}+0000beef"):
        assert not local_owner_gone(f"{other}:{dead.pid}:abcd1234")
    assert not local_owner_gone("garbage")
    assert not local_owner_gone(None)
