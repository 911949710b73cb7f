"""lockkit_core.process across ``os.fork()``: a child never hands out its parent's owner
tokens (drawn ahead of use) and knows its own process id (cached)."""

from __future__ import annotations

import json
import os

import pytest

from lockkit_core import process
from lockkit_core.process import TOKENS_PER_DRAW, new_owner_token

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_a_forked_child_draws_owner_tokens_of_its_own() -> None:
    new_owner_token()  # the parent now has tokens drawn ahead, which the child inherits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            seen = {
                "tokens": [new_owner_token() for _ in range(TOKENS_PER_DRAW)],
                "pid": process.pid(),
                "os_pid": os.getpid(),
            }
            os.write(write, json.dumps(seen).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    ours = {new_owner_token() for _ in range(TOKENS_PER_DRAW)}
    assert child["pid"] == child["os_pid"] != process.pid() == os.getpid()
    assert len(set(child["tokens"])) == TOKENS_PER_DRAW
    shared = ours & set(child["tokens"])
    assert not shared, f"the child handed out {len(shared)} of the parent's owner tokens"


def test_owner_tokens_are_128_bit_hex_and_never_repeat() -> None:
    tokens = [new_owner_token() for _ in range(5 * TOKENS_PER_DRAW)]
    assert len(set(tokens)) == len(tokens)
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in tokens)
