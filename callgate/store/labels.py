"""Session labels recorded with the outcome that makes a labelled result exist (issue 30 item 4).

A session *observes* a labelled result only once the call may have run, so a label is written
when the invocation reaches COMMITTED, OUTCOME_UNKNOWN or FAILED_AFTER_COMMIT from a state before
them, in the transaction that records that outcome, and never at Propose: a call that is denied,
cancelled, fails before the commit boundary or is merely proposed labels nothing, and costs no
store write for its labels. The executor side names the labels in the outcome event
(:data:`~callgate.base.meters.RESULT_LABELS_KEY`, the ToolSpec's ``result_labels`` as served
then); :func:`label_sqlite` / :func:`label_pg` write them beside the invocation's move.

The rows are those of the session-window meters the labels always were (``meter_totals``,
``label:<label>``, read by :meth:`~callgate.store.meters.MeterStore.labels`). At OUTCOME_UNKNOWN
they are also kept in ``meter_unknown``, as an unknown call's meter contributions are, so that a
Reconcile that finds the call not committed (FAILED_BEFORE_COMMIT) takes them back out
(:func:`~callgate.store.meters.settle_sqlite`); a later COMMITTED keeps them.

No advisory lock is taken on PostgreSQL: nothing reads a label meter under one (labels are read
as final totals), the upsert is atomic, and the write comes after the invocation's meter settle
in the transaction so it holds no row another settle waits for while it takes its locks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Final

from callgate.base.meters import LABEL_PREFIX, RESULT_LABELS_KEY, SESSION_WINDOW, label_scope
from callgate.base.states import State
from callgate.store.base import EventRecord, InvocationRecord

__all__ = ["OBSERVING", "label_pg", "label_sqlite", "result_labels"]

OBSERVING: Final = frozenset({State.COMMITTED, State.OUTCOME_UNKNOWN, State.FAILED_AFTER_COMMIT})
"""The states whose move (from a state before them) makes a result exist: the call may have run."""
_BEFORE_RESULT: Final = frozenset(
    {State.PROPOSED, State.PARSED, State.VALIDATED, State.AUTHORIZED, State.PREPARED, State.EXECUTING}
)
_SESSION_SEP: Final = "\x1e"
"""As :mod:`callgate.store.meters` keys a session-window total (scope, separator, session id)."""
_WIDTHS: Final = json.dumps([[SESSION_WINDOW, 0]])

_ADD = (
    "INSERT INTO {t}meter_totals VALUES (?,?,0,1,?) ON CONFLICT (meter, scope, width_ms) "
    "DO UPDATE SET total = {t}meter_totals.total + 1, "
    "through_ms = {greatest}({t}meter_totals.through_ms, excluded.through_ms)"
)
"""A session total's ``through_ms`` is when the session last added to it (retention of idle
sessions: :data:`callgate.store.meters.SESSION_IDLE`)."""
_UNKNOWN = "INSERT INTO {t}meter_unknown VALUES (?,?,?,1,0,?,?) ON CONFLICT DO NOTHING"
_SQLITE: Final = (_ADD.replace("{t}", "").replace("{greatest}", "max"), _UNKNOWN.replace("{t}", ""))
_PG: Final = (
    _ADD.replace("{t}", "callgate_").replace("{greatest}", "GREATEST").replace("?", "%s"),
    _UNKNOWN.replace("{t}", "callgate_").replace("?", "%s"),
)


def result_labels(
    record: InvocationRecord, expected: State, events: Sequence[EventRecord]
) -> tuple[str, ...]:
    """The labels this move records: those its events name, when it moves ``record`` from a state
    before the result into one where the result may exist; else none."""
    if record.state not in OBSERVING or expected not in _BEFORE_RESULT:
        return ()
    for e in events:
        named = e.data.get(RESULT_LABELS_KEY) if e.to_state is record.state else None
        if isinstance(named, list | tuple):
            return tuple(str(x) for x in named)
    return ()


def _rows(record: InvocationRecord, labels: Sequence[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(which statement, its args) per label: the total, and the unknown row at OUTCOME_UNKNOWN."""
    scope = label_scope(record.tenant, record.session_id)
    at_ms = _ms(record.updated_at) if labels else 0
    for label in labels:
        meter = LABEL_PREFIX + label
        yield "add", (meter, scope + _SESSION_SEP + record.session_id, at_ms)
        if record.state is State.OUTCOME_UNKNOWN:
            yield "unknown", (record.invocation_id, meter, scope, record.session_id, _WIDTHS)


def _ms(at: str) -> int:
    """An RFC 3339 time in milliseconds since the epoch (0 when it is not one)."""
    try:
        return int(datetime.fromisoformat(at).timestamp() * 1000)
    except ValueError:
        return 0


def label_sqlite(c: Any, record: InvocationRecord, expected: State, events: Sequence[EventRecord]) -> None:
    """Record the result's labels (:func:`result_labels`) in the SQLite transaction of the move."""
    for which, args in _rows(record, result_labels(record, expected, events)):
        c.execute(_SQLITE[0] if which == "add" else _SQLITE[1], args)


async def label_pg(
    conn: Any, record: InvocationRecord, expected: State, events: Sequence[EventRecord]
) -> None:
    """:func:`label_sqlite` on PostgreSQL (after the move's meter settle, no advisory lock)."""
    for which, args in _rows(record, result_labels(record, expected, events)):
        await conn.execute(_PG[0] if which == "add" else _PG[1], args)
