/**
 * Tools for a model call in a provider's dialect: legal function names (OpenAI and several MCP
 * clients require ^[a-zA-Z0-9_-]{1,64}$) by the one rule of names.ts (`weather.get` ->
 * `weather__get`, as the Python client and the MCP gateway show it), mapped back to callgate's
 * name@version, and schemas transformed where the dialect requires it (OpenAI strict mode: no
 * `$schema`, every property required, optional ones nullable; the nulls are removed again before
 * the arguments are proposed). Descriptions are kept.
 */
import type { ToolSpec } from "./gen/callgate/v1/callgate_pb.js";
import { LEGAL_NAME, wireName } from "./names.js";

export { LEGAL_NAME };

export enum Dialect {
  OpenAI = "openai",
  Anthropic = "anthropic",
  MCP = "mcp",
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = { [k: string]: Json };

/** One tool as the model sees it, and what it maps back to. */
export interface GatedTool {
  /** The legal name shown to the model. */
  readonly name: string;
  readonly toolName: string;
  readonly toolVersion: string;
  readonly description: string;
  /** The schema as shown to the model (dialect-transformed). */
  readonly parameters: Schema;
  /** JSON pointers of the object properties made nullable for strict mode (their nulls are dropped). */
  readonly nullableOptional: readonly string[];
  /** The provider-format tool definition. */
  readonly definition: Record<string, unknown>;
}

/** The legal (model-facing) name for `name`: names.ts's wireName, kept for callers of 0.1. */
export function legalName(name: string): string {
  return wireName(name);
}

function stripDollarSchema(s: Json): Json {
  if (Array.isArray(s)) return s.map(stripDollarSchema);
  if (s === null || typeof s !== "object") return s;
  const out: { [k: string]: Json } = {};
  for (const [k, v] of Object.entries(s)) if (k !== "$schema") out[k] = stripDollarSchema(v);
  return out;
}

/** OpenAI strict mode: every property required; an optional one becomes nullable. */
function strictify(s: Json, pointer: string, nullable: string[]): Json {
  if (Array.isArray(s)) return s.map((x, i) => strictify(x, `${pointer}/${i}`, nullable));
  if (s === null || typeof s !== "object") return s;
  const out: { [k: string]: Json } = {};
  for (const [k, v] of Object.entries(s)) out[k] = v;
  const props = s["properties"];
  if (s["type"] === "object" && props && typeof props === "object" && !Array.isArray(props)) {
    const required = new Set(Array.isArray(s["required"]) ? (s["required"] as string[]) : []);
    const newProps: { [k: string]: Json } = {};
    for (const [name, sub] of Object.entries(props)) {
      const ptr = `${pointer}/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      let t = strictify(sub, ptr, nullable);
      if (!required.has(name) && t && typeof t === "object" && !Array.isArray(t)) {
        nullable.push(ptr);
        t = { anyOf: [t, { type: "null" }] };
      }
      newProps[name] = t;
    }
    out["properties"] = newProps;
    out["required"] = Object.keys(props);
    out["additionalProperties"] = false;
  }
  return out;
}

/** Builds the model-facing tool for one ToolSpec of ListTools, shown as `name` (names.ts). */
export function gatedTool(spec: ToolSpec, dialect: Dialect, name: string = wireName(spec.name)): GatedTool {
  let schema: Json;
  try {
    schema = JSON.parse(spec.inputSchemaJson) as Json;
  } catch {
    schema = { type: "object" };
  }
  schema = stripDollarSchema(schema);
  const nullable: string[] = [];
  let parameters = schema as Schema;
  let definition: Record<string, unknown>;
  switch (dialect) {
    case Dialect.OpenAI:
      parameters = strictify(schema, "", nullable) as Schema;
      definition = {
        type: "function",
        function: { name, description: spec.description, parameters, strict: true },
      };
      break;
    case Dialect.Anthropic:
      definition = { name, description: spec.description, input_schema: parameters };
      break;
    case Dialect.MCP:
      definition = { name, description: spec.description, inputSchema: parameters };
      if (spec.outputSchemaJson) {
        // The ToolSpec's output_schema: the sidecar withholds a result that does not conform.
        try {
          definition["outputSchema"] = stripDollarSchema(JSON.parse(spec.outputSchemaJson) as Json);
        } catch {
          // malformed text is not shown (the sidecar still checks results against its schema)
        }
      }
      break;
  }
  return {
    name,
    toolName: spec.name,
    toolVersion: spec.version,
    description: spec.description,
    parameters,
    nullableOptional: nullable,
    definition,
  };
}

/** Removes the nulls that strict mode made the model send for optional properties. */
export function dropStrictNulls(args: unknown, pointers: readonly string[]): unknown {
  if (pointers.length === 0 || args === null || typeof args !== "object") return args;
  const clone = JSON.parse(JSON.stringify(args)) as Json;
  // Deepest pointers first so a parent's removal does not hide a child's.
  for (const ptr of [...pointers].sort((a, b) => b.length - a.length)) {
    const parts = ptr.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    let node: Json = clone;
    for (const part of parts.slice(0, -1)) {
      if (node === null || typeof node !== "object" || Array.isArray(node)) break;
      node = (node as { [k: string]: Json })[part] ?? null;
    }
    const last = parts[parts.length - 1];
    if (last !== undefined && node && typeof node === "object" && !Array.isArray(node) && node[last] === null) {
      delete node[last];
    }
  }
  return clone;
}

/** How many object members `value` holds, at any depth. */
function members(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  const items = Array.isArray(value) ? value : Object.values(value as Record<string, unknown>);
  return (Array.isArray(value) ? 0 : items.length) + items.reduce((n: number, v) => n + members(v), 0);
}

/**
 * Whether JSON.parse kept everything `text` says: no key repeated (a member per `:` outside
 * strings) and every number exact (no integer beyond 2^53, nothing that overflows).
 */
function parsedExactly(text: string, parsed: unknown): boolean {
  let colons = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
    } else if (c === ":") {
      colons++;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      let j = i;
      while (j < text.length && "+-0123456789.eE".includes(text[j]!)) j++;
      const token = text.slice(i, j);
      const n = Number(token);
      if (!Number.isFinite(n) || (/^-?\d+$/.test(token) && !Number.isSafeInteger(n))) return false;
      i = j - 1;
    }
  }
  return colons === members(parsed);
}

/**
 * The argument text with the nulls strict mode made the model send for optional properties
 * removed. The exact text whenever nothing is dropped, it is not JSON, it repeats a key, or it
 * holds a number JSON.parse cannot keep exactly: the sidecar's strict parse judges those bytes
 * (re-serializing would silently keep one of two duplicate keys).
 */
export function stripStrictNullsText(text: string, pointers: readonly string[]): string {
  if (pointers.length === 0) return text;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  const dropped = dropStrictNulls(parsed, pointers);
  if (members(dropped) === members(parsed) || !parsedExactly(text, parsed)) return text;
  return JSON.stringify(dropped);
}
