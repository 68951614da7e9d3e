"""``callgate policy prove``: properties of a Cedar policy set checked over every request.

The properties file (:mod:`.properties`, docs/PROVE.md) names what must hold; :mod:`.runner` turns
each property into checks of the symbolic compiler ``cedar-policy-symcc`` (the ``callgate-prove``
binary, native/prove/, built by scripts/prove) run against cvc5 (scripts/solver); a refuted
property comes back with a concrete counterexample request that :mod:`.replay` runs through the
real engines. Unknown (a timeout, a solver failure) is never reported as proved.
"""

DEFAULT_SOLVER_TIMEOUT_MS = 10_000
"""The solver's time limit per query (``--tlimit-per``); past it the answer is unknown."""
DEFAULT_WALL_SECONDS = 120.0
"""The whole run's wall-clock bound; the checks without an answer by then are unknown."""
