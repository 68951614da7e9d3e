"""Config validation and the 6.2 state machine."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from callgate.base.errors import CallgateError, ErrorCode, LoadError
from callgate.base.states import EDGES, TERMINAL, State, check_transition
from callgate.config import load_config
from tests.conftest import ROOT

HAPPY = ["PROPOSED", "PARSED", "VALIDATED", "AUTHORIZED", "PREPARED", "EXECUTING", "COMMITTED", "OBSERVED"]


def test_example_config_loads() -> None:
    cfg = load_config(ROOT / "callgate.toml")
    assert cfg.server.agent.tcp == "127.0.0.1:7401" and cfg.policy.engine == "cedar"


@pytest.mark.parametrize(
    "text,fragment",
    [
        ('[server]\nagent = { tcp = "0.0.0.0:7401" }\n', "not loopback"),
        ('[server]\nagent = { tcp = "10.1.2.3:7401" }\n', "not loopback"),
        ('[store]\npaht = "x.db"\n', "unknown key 'store.paht'"),
        ("[stroe]\n", "unknown section"),
        ('[limits]\nmax_depth = "64"\n', "must be int"),
        ('[server]\nagent = { socket = "a.sock" }\nconfirmer = { socket = "a.sock" }\n', "own socket"),
        ('[policy]\nengine = "magic"\n', "not supported"),
        ("[limits\n", "line 1"),
    ],
)
def test_bad_config_is_refused(tmp_path: Path, text: str, fragment: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(LoadError) as err:
        load_config(p)
    assert err.value.code is ErrorCode.CONFIG_INVALID and fragment in str(err.value)


def test_happy_path_edges() -> None:
    for a, b in itertools.pairwise(HAPPY):
        check_transition(State(a), State(b))


@pytest.mark.parametrize("src", list(State))
def test_no_skipping_and_terminals_are_final(src: State) -> None:
    for dst in State:
        allowed = dst in EDGES[src]
        if allowed:
            check_transition(src, dst)
            continue
        with pytest.raises(CallgateError) as err:
            check_transition(src, dst)
        assert err.value.code in (ErrorCode.ILLEGAL_TRANSITION, ErrorCode.TERMINAL_STATE)
    if src in TERMINAL:
        assert not EDGES[src]


def test_never_proposed_to_executing_nor_unknown_back_to_prepared() -> None:
    assert State.EXECUTING not in EDGES[State.PROPOSED]
    assert State.PREPARED not in EDGES[State.OUTCOME_UNKNOWN]
    assert State.CANCELLED_BEFORE_COMMIT not in EDGES[State.COMMITTED]
