"""callgate.base.ids: unguessable ids from the OS CSPRNG, buffered, fork-safe."""

from __future__ import annotations

import os
import re

from callgate.base.ids import new_id


def test_ids_are_128_bit_hex_and_distinct() -> None:
    ids = [new_id() for _ in range(20_000)]  # crosses several 4 KiB refills
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_repeat_the_parent() -> None:
    new_id()  # the parent holds a partly used buffer
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(w, new_id().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    assert child != new_id()
    assert re.fullmatch(r"[0-9a-f]{32}", child)


def test_ids_sort_by_creation_time_and_keep_80_random_bits() -> None:
    import time

    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(5_000)]
    after = time.time_ns() // 1_000_000
    prefixes = [int(i[:12], 16) for i in ids]
    assert prefixes == sorted(prefixes)  # never decreasing: new rows append to the indexes
    assert before <= prefixes[0] and prefixes[-1] <= after
    tails = {i[12:] for i in ids}
    assert len(tails) == len(ids)  # the random part alone tells them apart
    # 80 bits per id: every hex digit of the random part takes many values across the ids
    assert all(len({t[k] for t in tails}) >= 12 for k in range(20))
