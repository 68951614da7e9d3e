"""Flat costs for the Cedar engine (issue 15 A): policy slices, entity slices, linear loading.

* **Policy slices.** Every policy's scope is read once at load (from Cedar's JSON form). A request
  can only match a policy whose action scope names its action or an ancestor of it (the action
  hierarchy is Cedar's own, read from the entity set Cedar builds from the schema), and whose
  principal/resource scope admits the request's ``User``/``Resource`` type. One ``PolicySet`` is
  prepared per distinct slice, once per snapshot; a policy with an unconstrained action (or a scope
  this module does not recognise) is in every slice. A policy outside a request's slice cannot
  determine or error on that request (its scope does not match, so its conditions are never
  evaluated), so the decision and its reasons are the same as over the whole set.
* **Entity slices.** A request's entity data is the principal, the resource and the action, plus
  every entity reachable from them (parents and entity references in attributes and tags) and
  from the entity literals of the policies, closed once per snapshot; never a copy of the set.
  The static entities are kept once, as Cedar's own explicit JSON (``__entity``/``__extn``
  escapes), so a slice parses without the schema and means exactly what the whole set meant.
* **Linear loading.** Line numbers come from one index of newline offsets; Cedar's JSON form is
  produced in chunks of statements (each call short, so a reload in a worker thread never holds
  the interpreter for long); validation runs per group of policies against a schema restricted to
  the actions the group can apply to (Cedar's validator costs policies x actions over a whole
  schema), falling back to the whole schema, whose errors are the ones reported.
"""

from __future__ import annotations

import bisect
import json
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cedarpy

ACTION_TYPE = "Action"
EST_CHUNK = 16
"""Statements per ``policies_to_json_str`` call (it holds the GIL: a few ms each at most)."""

Uid = tuple[str, str]
LITERALS = "callgate:literals"
"""Key of :func:`est_chunked`'s answer listing the policies that may hold entity literals."""


class LineIndex:
    """Line numbers of offsets in one text, from a single scan for newlines."""

    __slots__ = ("_nl",)

    def __init__(self, text: str) -> None:
        nl: list[int] = []
        i = text.find("\n")
        while i >= 0:
            nl.append(i)
            i = text.find("\n", i + 1)
        self._nl = nl

    def line_of(self, offset: int) -> int:
        return bisect.bisect_left(self._nl, offset) + 1


def statement_spans(starts: Sequence[int], text_len: int) -> list[tuple[int, int]]:
    return [(s, starts[k + 1] if k + 1 < len(starts) else text_len) for k, s in enumerate(starts)]


_POS = re.compile(r"policy(\d+)")


def est_chunked(text: str, spans: Sequence[tuple[int, int]]) -> dict[str, Any] | None:
    """Cedar's JSON form of ``text`` built chunk by chunk, with the positional ids the whole text
    would get (``policy0``...), or ``None`` when the chunks do not line up with the statements
    (then the caller converts the whole text). Raises ``ValueError`` on a syntax error."""
    static: dict[str, Any] = {}
    literals: list[str] = []
    for k in range(0, len(spans), EST_CHUNK):
        part = spans[k : k + EST_CHUNK]
        raw = cedarpy.policies_to_json_str(text[part[0][0] : part[-1][1]])
        est = json.loads(raw)
        if est.get("templates"):
            return {"staticPolicies": static, "templates": est["templates"]}
        chunk: dict[str, Any] = est.get("staticPolicies", {})
        has_literals = "__entity" in raw  # scope entities are plain {"type", "id"}: only literals
        if len(chunk) != len(part):
            return None
        for local, body in chunk.items():
            m = _POS.fullmatch(local)
            if m is None:
                return None
            static[f"policy{k + int(m.group(1))}"] = body
            if has_literals:
                literals.append(f"policy{k + int(m.group(1))}")
    if len(static) != len(spans):
        return None
    return {"staticPolicies": static, "templates": {}, LITERALS: literals}


@dataclass(frozen=True, slots=True)
class ActionGraph:
    """Cedar's action hierarchy (``Action`` entities built from the schema)."""

    parents: Mapping[str, tuple[str, ...]]

    def ancestors(self, action: str) -> frozenset[str]:
        seen: set[str] = set()
        todo = list(self.parents.get(action, ()))
        while todo:
            a = todo.pop()
            if a not in seen:
                seen.add(a)
                todo.extend(self.parents.get(a, ()))
        return frozenset(seen)

    def descendants(self) -> dict[str, set[str]]:
        """Action -> every action below it (not itself)."""
        out: dict[str, set[str]] = {}
        for a in self.parents:
            for anc in self.ancestors(a):
                out.setdefault(anc, set()).add(a)
        return out


def _scope_entities(scope: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    if "entity" in scope:
        e = scope["entity"]
        return [e] if isinstance(e, Mapping) else None
    es = scope.get("entities")
    return list(es) if isinstance(es, list) else None


def scope_actions(body: Mapping[str, Any], descendants: Mapping[str, set[str]]) -> frozenset[str] | None:
    """Actions (of type ``Action``) the policy's action scope can match; ``None`` = any action
    (unconstrained, or a shape not recognised: the policy then goes to every slice)."""
    scope = body.get("action")
    if not isinstance(scope, Mapping):
        return None
    op = scope.get("op")
    if op == "All":
        return None
    if op not in ("==", "in"):
        return None
    ents = _scope_entities(scope)
    if ents is None:
        return None
    out: set[str] = set()
    for e in ents:
        if not isinstance(e.get("type"), str) or not isinstance(e.get("id"), str):
            return None
        if e["type"] != ACTION_TYPE:
            continue  # an action of another type never equals Action::"<capability>"
        out.add(e["id"])
        if op == "in":
            out |= descendants.get(e["id"], set())
    return frozenset(out)


def scope_admits(scope: Any, entity_type: str) -> bool:
    """Whether a principal/resource scope can match an entity of ``entity_type`` (conservative)."""
    if not isinstance(scope, Mapping):
        return True
    op = scope.get("op")
    if op == "==":
        e = scope.get("entity")
        return not (isinstance(e, Mapping) and isinstance(e.get("type"), str) and e["type"] != entity_type)
    if op == "is":
        t = scope.get("entity_type")
        return not (isinstance(t, str) and t != entity_type)
    return True


@dataclass(frozen=True, slots=True)
class Slice:
    """One prepared ``PolicySet`` and, when it was parsed from text, the snapshot's positional id
    of each of its policies (Cedar numbers a parsed text ``policy0``... again)."""

    policy_set: Any
    ids: tuple[str, ...] = ()
    source: str = ""
    """What :attr:`policy_set` was parsed from (policy text, or Cedar's JSON form when
    :attr:`source_json`): the compiled core parses the same slice (``callgate._native``)."""
    source_json: bool = False

    def global_id(self, local: str) -> str:
        if not self.ids:
            return local
        m = _POS.fullmatch(local)
        if m is None or int(m.group(1)) >= len(self.ids):
            return local
        return self.ids[int(m.group(1))]


@dataclass(frozen=True, slots=True)
class PolicySlices:
    """One prepared slice per distinct set of policies; a request reads the one for its action."""

    by_action: Mapping[str, Slice]
    """Action id -> its enforcing slice."""
    default: Slice
    """The slice of an action no scope names (the unconstrained policies)."""
    shadow_by_action: Mapping[str, Slice] | None
    shadow_default: Slice | None
    sizes: Mapping[str, int]
    """Action id -> policies in its enforcing slice (for diagnostics and tests)."""

    def enforcing(self, action: str) -> Slice:
        return self.by_action.get(action, self.default)

    def shadow(self, action: str) -> Slice | None:
        if self.shadow_by_action is None:
            return None
        return self.shadow_by_action.get(action, self.shadow_default)


def build_slices(
    static: Mapping[str, Any],
    enforcing: Iterable[str],
    has_shadow: bool,
    graph: ActionGraph,
    principal_type: str,
    resource_type: str,
    texts: Mapping[str, str] | None = None,
    *,
    python: bool = True,
) -> PolicySlices:
    """``texts`` (positional id -> the policy's statement text), when given, is what a slice is
    parsed from (Cedar parses text ~3x faster than its JSON form); else the JSON form is used.
    ``python=False`` leaves cedarpy's ``PolicySet`` out (``Slice.policy_set`` is None): only the
    compiled core, which parses :attr:`Slice.source`, serves the snapshot."""
    descendants = graph.descendants()
    everywhere: list[str] = []
    per_action: dict[str, list[str]] = {}
    for pid, body in static.items():
        if not (
            scope_admits(body.get("principal"), principal_type)
            and scope_admits(body.get("resource"), resource_type)
        ):
            continue
        acts = scope_actions(body, descendants)
        if acts is None:
            everywhere.append(pid)
        else:
            for a in acts:
                per_action.setdefault(a, []).append(pid)
    order = {pid: k for k, pid in enumerate(static)}
    enforcing_ids = set(enforcing)
    prepared: dict[tuple[str, ...], Slice] = {}
    fragments: dict[str, str] = {}

    def prepare(ids: list[str]) -> Slice:
        key = tuple(sorted(ids, key=order.__getitem__))
        got = prepared.get(key)
        if got is not None:
            return got
        if texts is not None:
            source = "\n".join(texts[i] for i in key)
            got = Slice(cedarpy.PolicySet.from_str(source, release_gil=True) if python else None, key, source)
        else:
            for i in key:
                if i not in fragments:
                    fragments[i] = json.dumps(static[i], separators=(",", ":"))
            doc = '{"staticPolicies":{' + ",".join(f"{json.dumps(i)}:{fragments[i]}" for i in key)
            doc += '},"templates":{},"templateLinks":[]}'
            got = Slice(
                cedarpy.PolicySet.from_json_str(doc, release_gil=True) if python else None, (), doc, True
            )
        prepared[key] = got
        return got

    by_action: dict[str, Slice] = {}
    shadow_by: dict[str, Slice] = {}
    sizes: dict[str, int] = {}
    for a in sorted(set(per_action) | set(graph.parents)):
        ids = everywhere + per_action.get(a, [])
        enf = [i for i in ids if i in enforcing_ids]
        by_action[a] = prepare(enf)
        sizes[a] = len(enf)
        if has_shadow:
            shadow_by[a] = prepare(ids)
    return PolicySlices(
        by_action=by_action,
        default=prepare([i for i in everywhere if i in enforcing_ids]),
        shadow_by_action=shadow_by if has_shadow else None,
        shadow_default=prepare(everywhere) if has_shadow else None,
        sizes=sizes,
    )


# --- validation against schemas restricted to what each group can apply to ----------------------
_ACTION_DECL = re.compile(r'action\s+"([^"\\]*)"')


def _schema_parts(schema_text: str) -> tuple[str, dict[str, str]] | None:
    """(non-action declarations, action id -> its declaration) of Cedar's canonical rendering of a
    schema, or ``None`` when it is not a flat list of simple declarations (then: whole schema)."""
    from callgate.policy.engines.cedar import _statement_starts

    base: list[str] = []
    actions: dict[str, str] = {}
    starts = _statement_starts(schema_text)
    for s, e in statement_spans(starts, len(schema_text)):
        decl = schema_text[s:e].strip()
        head = decl.split(None, 1)[0] if decl else ""
        if head == "namespace" or decl.startswith("@"):
            return None
        if head == "action":
            if "," in decl.split("appliesTo", 1)[0].split(" in ", 1)[0]:
                return None  # several names in one declaration
            m = _ACTION_DECL.match(decl)
            if m is None:
                return None
            actions[m.group(1)] = decl
        elif head in ("entity", "type"):
            base.append(decl)
        else:
            return None
    return "\n".join(base), actions


def validate_grouped(
    spans: Sequence[tuple[int, int]],
    text: str,
    static: Mapping[str, Any],
    schema: Any,
    graph: ActionGraph,
) -> bool:
    """``True`` when every policy validates. Groups policies by the actions their scope names and
    validates each group against the schema cut to those actions (and their ancestors and
    descendants); any doubt (an unconstrained policy, a failing group, a schema this cannot cut)
    is settled against the whole schema. ``False`` means: validate the whole text (its errors are
    the ones to report)."""
    parts = _schema_parts(str(schema))
    if parts is None or len(spans) != len(static):
        return False
    base, decls = parts
    descendants = graph.descendants()
    groups: dict[frozenset[str] | None, list[int]] = {}
    for k, body in enumerate(static.values()):
        acts = scope_actions(body, descendants)
        groups.setdefault(acts, []).append(k)
    for acts, members in groups.items():
        chunk = "\n".join(text[spans[k][0] : spans[k][1]] for k in members)
        target: Any = schema
        if acts is not None:
            closure: set[str] = set()
            for a in acts:
                closure.add(a)
                closure |= graph.ancestors(a)
            if not closure <= decls.keys():
                return False
            if len(closure) < len(decls):
                try:
                    target = cedarpy.Schema.from_str(
                        base + "\n" + "\n".join(decls[a] for a in sorted(closure)), release_gil=True
                    )
                except ValueError:
                    target = schema
        result = cedarpy.validate_policies(chunk, target, release_gil=True)
        if not result.validation_passed and target is not schema:
            result = cedarpy.validate_policies(chunk, schema, release_gil=True)
        if not result.validation_passed:
            return False
    return True


# --- entities -----------------------------------------------------------------------------------
def _refs(value: Any, out: list[Uid]) -> None:
    """Entity uids referenced anywhere in an explicit-form JSON value (``__entity`` escapes and
    ``{"type", "id"}`` objects: over-inclusion is harmless, a missed one is not)."""
    if isinstance(value, dict):
        t, i = value.get("type"), value.get("id")
        if isinstance(t, str) and isinstance(i, str):
            out.append((t, i))
        for v in value.values():
            _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


_BETWEEN = re.compile(r"[\s,]*")


def each_element(array_text: str) -> Iterator[Any]:
    """The elements of a JSON array text, decoded one at a time (never the whole array as Python
    objects). Raises ValueError when the text is not an array, or at the first element that
    does not decode."""
    decoder = json.JSONDecoder()
    i = _BETWEEN.match(array_text, 0).end()  # type: ignore[union-attr]
    if array_text[i : i + 1] != "[":
        raise ValueError("entities: a JSON array expected")
    i += 1
    while True:
        i = _BETWEEN.match(array_text, i).end()  # type: ignore[union-attr]
        if i >= len(array_text) or array_text[i] == "]":
            return
        value, i = decoder.raw_decode(array_text, i)
        yield value


def release_free_memory() -> None:
    """Give freed heap back to the OS after a load (glibc keeps it otherwise: measured 340 MiB
    of RSS left behind by loading 100,000 entities, 110 MiB after this). No-op elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def literal_uids(policy_static: Mapping[str, Any]) -> list[Uid]:
    """The entity uids named in the policies' conditions (their closure is in every slice).
    Scope entities are only ever the right side of == / in (no data needed); entity literals in
    conditions may be dereferenced (``User::"x".tenant``)."""
    literals: list[Uid] = []
    for body in policy_static.values():
        _refs(body.get("conditions", []), literals)
    return literals


def release_incrementally(table: dict[Any, Any]) -> None:
    """Empty ``table`` one entry at a time. Dropping a large nested structure at once (Cedar's
    JSON form of 10,000 policies: ~1M objects) is one deallocation cascade holding the GIL for
    tens of ms, whichever thread runs it; entry by entry, the event loop gets the GIL between."""
    while table:
        table.popitem()


def _key(uid: Uid) -> str:
    return uid[0] + "\x00" + uid[1]


def _head(uid: Uid) -> bytes:
    """How the compact JSON of the entity ``uid`` starts (Cedar renders ``uid`` first)."""
    return (
        '{"uid":' + json.dumps({"type": uid[0], "id": uid[1]}, separators=(",", ":"), ensure_ascii=False)
    ).encode()


@dataclass(frozen=True, slots=True)
class EntityIndex:
    """The static entities once, as explicit JSON in one buffer, with the edges a slice follows.

    Compact on purpose (issue 15: memory ~1x the set): one bytes buffer of every entity's JSON,
    an offsets array, the entities' key hashes sorted (with their numbers) instead of a dict, a
    hit confirmed against the entity's own JSON, and edges only for the entities that have any."""

    hashes: array[int]
    """``hash(type NUL id)`` of every entity, sorted."""
    numbers: array[int]
    """The entity number of each entry of :attr:`hashes`."""
    blob: bytes
    offsets: array[int]
    edges: Mapping[int, tuple[int, ...]]
    always: tuple[int, ...]
    """Entities reachable from the entity literals in the policies' conditions (in every slice)."""

    @classmethod
    def build(cls, rendered: str, policy_static: Mapping[str, Any]) -> tuple[EntityIndex, ActionGraph]:
        index: dict[str, int] = {}
        parts: list[bytes] = []
        offsets = array("Q", [0])
        refs: dict[int, list[str]] = {}
        action_parents: dict[str, tuple[str, ...]] = {}
        for r in each_element(rendered):  # one record alive at a time: no parsed copy of the set
            uid = (r["uid"]["type"], r["uid"]["id"])
            part = json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode()
            n = len(parts)
            index[_key(uid)] = n
            parts.append(part)
            offsets.append(offsets[-1] + len(part))
            out: list[Uid] = []
            _refs(r.get("parents", []), out)
            if uid[0] == ACTION_TYPE:
                action_parents[uid[1]] = tuple(i for t, i in out if t == ACTION_TYPE)
            _refs(r.get("attrs", {}), out)
            _refs(r.get("tags", {}), out)
            if out:
                refs[n] = [_key(u) for u in dict.fromkeys(out) if u != uid]
        edges: dict[int, tuple[int, ...]] = {}
        for n, keys in refs.items():
            targets = tuple(index[k] for k in keys if k in index)
            if targets:
                edges[n] = targets
        ordered = sorted((hash(k), n) for k, n in index.items())
        del index
        hashes = array("q", (h for h, _ in ordered))
        numbers = array("Q", (n for _, n in ordered))
        del ordered
        literals = literal_uids(policy_static)
        blob = b"".join(parts)
        del parts
        partial = cls(hashes, numbers, blob, offsets, edges, ())
        always = tuple(partial.closure(dict.fromkeys(literals)))
        return cls(hashes, numbers, blob, offsets, edges, always), ActionGraph(action_parents)

    def number(self, uid: Uid) -> int | None:
        """The entity's number, or ``None`` when the set does not have it."""
        h = hash(_key(uid))
        i = bisect.bisect_left(self.hashes, h)
        head = None
        while i < len(self.hashes) and self.hashes[i] == h:
            n = self.numbers[i]
            head = head or _head(uid)
            if self.blob.startswith(head, self.offsets[n]) and self.blob[self.offsets[n] + len(head)] == ord(
                ","
            ):
                return n
            i += 1
        return None

    def __contains__(self, uid: Uid) -> bool:
        return self.number(uid) is not None

    def __len__(self) -> int:
        return len(self.numbers)

    def closure(self, roots: Iterable[Uid], extra: Iterable[int] = ()) -> list[int]:
        """Numbers of the entities reachable from ``roots`` (uids) and ``extra`` (numbers)."""
        seen: set[int] = set()
        order: list[int] = []
        todo = [n for n in (self.number(u) for u in roots) if n is not None]
        todo.extend(extra)
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            todo.extend(self.edges.get(n, ()))
        return order

    def fragment(self, n: int) -> str:
        return self.blob[self.offsets[n] : self.offsets[n + 1]].decode()

    def slice_json(self, roots: Sequence[Uid], added: Sequence[str]) -> str:
        """The JSON entity list of one request: ``roots`` and the ``always`` set with everything
        reachable from them, plus the request's own (already serialized) entities."""
        numbers = self.closure(roots, self.always)
        return "[" + ",".join([*(self.fragment(n) for n in numbers), *added]) + "]"
