"""The one bridge to the compiled core ``callgate._native`` (the Rust crate in ``native/``,
docs/NATIVE.md): nothing else imports the compiled module.

    loader.py     loading once per process, why it is missing, and :class:`NativeModule`: the
                  typed call surface (checked by mypy against ``callgate/_native.pyi``)
    handback.py   every reason the core hands a proposal back to the Python stages, as a list

The engines' side of the contract is :class:`callgate.policy.engines.base.CompiledDecider`; the
seam that runs the front stages on the compiled core is :mod:`callgate.propose.core`.
"""

from callgate.native.handback import HANDBACKS, HandBack
from callgate.native.loader import (
    NATIVE_MODULE,
    NOT_BUILT,
    CoreEngine,
    NativeModule,
    compiled_core_runs,
    load_native,
    native_missing,
)

__all__ = [
    "HANDBACKS",
    "NATIVE_MODULE",
    "NOT_BUILT",
    "CoreEngine",
    "HandBack",
    "NativeModule",
    "compiled_core_runs",
    "load_native",
    "native_missing",
]
