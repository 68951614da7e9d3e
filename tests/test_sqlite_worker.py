"""SQLiteWorker: group commit with per-operation isolation, alone or in a batch."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from callgate.core.errors import CallgateError, ErrorCode
from callgate.store.sqlite_worker import SQLiteWorker

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER NOT NULL);"


def rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as c:  # a separate connection sees only what was committed
        return dict(c.execute("SELECT k, v FROM t").fetchall())


def insert(k: str, v: int, then_fail: BaseException | None = None):  # type: ignore[no-untyped-def]
    def op(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t VALUES (?, ?)", (k, v))
        if then_fail is not None:
            raise then_fail
        return k

    return op


def test_an_operation_alone_commits_or_rolls_back(tmp_path: Path) -> None:
    async def main() -> None:
        w = SQLiteWorker(tmp_path / "w.db", schema=SCHEMA)
        assert await w.run(insert("a", 1)) == "a"
        with pytest.raises(ValueError):  # the op's own error passes through, its writes undone
            await w.run(insert("b", 2, then_fail=ValueError("no")))
        with pytest.raises(CallgateError) as err:  # a SQLite error is store_unavailable
            await w.run(insert("a", 3))
        assert err.value.code is ErrorCode.STORE_UNAVAILABLE
        assert await w.run(insert("c", 4)) == "c"  # the connection is usable afterwards
        await w.close()
        with pytest.raises(CallgateError):
            await w.run(insert("d", 5))

    asyncio.run(main())
    assert rows(tmp_path / "w.db") == {"a": 1, "c": 4}


def test_a_failing_operation_in_a_batch_is_rolled_back_alone(tmp_path: Path) -> None:
    async def main() -> list[object]:
        w = SQLiteWorker(tmp_path / "w.db", schema=SCHEMA)
        gate = threading.Event()

        def hold(c: sqlite3.Connection) -> None:  # keeps the writer busy while the batch queues
            gate.wait(5)

        first = asyncio.ensure_future(w.run(hold))
        await asyncio.sleep(0.05)
        ops = [insert("x", 1), insert("y", 2, then_fail=KeyError("y")), insert("x", 9), insert("z", 3)]
        batch = [asyncio.ensure_future(w.run(op)) for op in ops]
        await asyncio.sleep(0.05)
        gate.set()
        await first
        out = await asyncio.gather(*batch, return_exceptions=True)
        await w.close()
        return out

    out = asyncio.run(main())
    assert out[0] == "x" and out[3] == "z"
    assert isinstance(out[1], KeyError)
    assert isinstance(out[2], CallgateError) and out[2].code is ErrorCode.STORE_UNAVAILABLE
    assert rows(tmp_path / "w.db") == {"x": 1, "z": 3}
