"""A cheaper constructor for frozen, slotted dataclasses built on the request path.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__`` (the
frozen guard's way round), about 0.3 µs per field on the serving box: an invocation record of 24
fields is ~8 µs, each event ~4 µs, six events per ``Propose`` (issue 15, loop diet).
:func:`builder` returns a function taking every field by keyword (or position, in field order)
that sets the slots through their descriptors: the same object, equal to the one ``__init__``
builds, in about half the time. Only for classes whose ``__init__`` does nothing but assign
(no ``__post_init__``, no ``InitVar``, every field in ``__init__``): checked when the builder is
made, and every field must be given (no defaults applied).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def builder(cls: type[T]) -> Callable[..., T]:
    """A constructor of ``cls`` that assigns the slots directly; every field is required."""
    if not dataclasses.is_dataclass(cls) or not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: use its constructor")
    names = [f.name for f in dataclasses.fields(cls)]
    if any(name.startswith("_") for name in names):
        raise TypeError(f"{cls.__name__} has a field named with a leading underscore")
    if any(not f.init for f in dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__} has fields outside __init__")
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for i, name in enumerate(names):
        env[f"_s{i}"] = cls.__dict__[name].__set__
    body = "".join(f"    _s{i}(_o, {name})\n" for i, name in enumerate(names))
    src = f"def build({', '.join(names)}):\n    _o = _new(_cls)\n{body}    return _o\n"
    exec(src, env)  # generated from the dataclass's own field names, as dataclasses does
    build: Callable[..., T] = env["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    return build


__all__ = ["builder"]
