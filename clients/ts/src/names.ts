/**
 * The one tool-name rule (docs/MCP.md "Tool names"), the same as the Python client's and the MCP
 * gateway's (callgate/client/names.py): tests/data/tool_names.json is read by both suites.
 *
 * A callgate name (`weather.get`, `everything.get-tiny-image`) is dot-separated segments of
 * letters, digits and "-" with single "_" between them. Its model-facing name replaces each "."
 * with "__" (`weather__get`): reversible, since a callgate name never holds "__" nor a "_" next
 * to a ".". A model-facing name longer than 64 is cut to 49 characters and given "___" and 12 hex
 * of sha256(name); a second version of one name shown in the same list gets the digest of
 * `name@version`. Shortened names resolve only through the listed tools.
 */
import { createHash } from "node:crypto";

/** What OpenAI function calling and several MCP clients accept as a tool name. */
export const LEGAL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const SEGMENT = "[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*";
/** A callgate tool name (ToolSpec `name`), at most 128 characters. */
export const TOOL_NAME = new RegExp(`^${SEGMENT}(?:\\.${SEGMENT})*$`);
const MAX_WIRE = 64;
const HASHED = "___";
const DIGEST_HEX = 12;

/** True when `name` is a callgate tool name. */
export function isToolName(name: string): boolean {
  return name.length >= 1 && name.length <= 128 && TOOL_NAME.test(name);
}

/** The model-facing name of callgate tool `name` (with `version`: the form for a second version). */
export function wireName(name: string, version?: string): string {
  const plain = name.replace(/\./g, "__");
  if (version === undefined && plain.length <= MAX_WIRE) return plain;
  const key = version === undefined ? name : `${name}@${version}`;
  const digest = createHash("sha256").update(key, "utf8").digest("hex").slice(0, DIGEST_HEX);
  return plain.slice(0, MAX_WIRE - HASHED.length - DIGEST_HEX) + HASHED + digest;
}

/** The model-facing name of each tool of one list, keyed by `name@version` (sorted as the Python client does). */
export function wireNames(tools: readonly { name: string; version: string }[]): Map<string, string> {
  const sorted = [...tools].sort((a, b) => cmp(a.name, b.name) || cmp(a.version, b.version));
  const taken = new Set<string>();
  const out = new Map<string, string>();
  for (const t of sorted) {
    let wire = wireName(t.name);
    if (taken.has(wire)) wire = wireName(t.name, t.version);
    if (taken.has(wire)) throw new Error(`tool ${t.name}@${t.version}: model-facing name ${wire} is taken`);
    taken.add(wire);
    out.set(`${t.name}@${t.version}`, wire);
  }
  return out;
}

/** Code-point order (Python's sort of str), not locale order. */
function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
