"""callgate.base.fastinit: the slot-setting constructor builds the object __init__ builds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from callgate.base.fastinit import builder
from callgate.base.model import NormalizationContext, NormalizedArguments, Proposal, ValidatedArguments
from callgate.base.states import State
from callgate.store.base import EventRecord, InvocationRecord, Usage


def _sample(cls: type) -> dict[str, object]:
    values: dict[str, object] = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        t = str(f.type)
        if "State" in t:
            values[f.name] = State.PROPOSED
        elif t.startswith("int"):
            values[f.name] = i
        elif t.startswith("bytes"):
            values[f.name] = f"b{i}".encode()
        elif t.startswith("bool"):
            values[f.name] = True
        elif "Mapping" in t or "dict" in t:
            values[f.name] = {"k": i}
        elif "tuple" in t:
            values[f.name] = (f"t{i}",)
        else:
            values[f.name] = f"v{i}"
    return values


@pytest.mark.parametrize(
    "cls",
    [
        EventRecord,
        InvocationRecord,
        Usage,
        Proposal,
        ValidatedArguments,
        NormalizationContext,
        NormalizedArguments,
    ],
)
def test_builder_equals_init(cls: type) -> None:
    values = _sample(cls)
    built = builder(cls)(**values)
    assert type(built) is cls
    assert built == cls(**values)
    for name, value in values.items():
        assert getattr(built, name) is value
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, next(iter(values)), "x")


def test_builder_applies_the_defaults() -> None:
    assert builder(Usage)(model_calls=1) == Usage(model_calls=1)
    assert builder(Usage)(1, 2) == Usage(1, 2)
    make = builder(EventRecord)
    values = {k: v for k, v in _sample(EventRecord).items() if k != "data"}
    a, b = make(**values), make(**values)
    assert a == EventRecord(**values)  # type: ignore[arg-type]
    assert a.data == {} and a.data is not b.data  # default_factory, called per object
    with pytest.raises(TypeError):
        make(event_id="e")  # a field without a default is required, as in __init__
    with pytest.raises(TypeError):
        make(**values, unknown=1)


def test_builder_refuses_what_init_does_more_for() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError):
        builder(Checked)
    with pytest.raises(TypeError):
        builder(NoSlots)
