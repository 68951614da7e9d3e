#!/usr/bin/env node
// MCP client harness on the TypeScript MCP SDK (@modelcontextprotocol/sdk), for the pytest tests
// of the MCP gateway (tests/test_mcp_upstreams.py, tests/test_mcp_published.py).
//
//   node harness.mjs --scenario FILE|-
//
// It connects to one MCP server (launched over stdio, or a streamable HTTP URL), runs a JSON
// scenario of steps, answers the server's elicitation requests per a scripted choice, and prints
// one JSON object per line on stdout for everything it sees (results, errors, elicitations,
// progress and other notifications). Diagnostics go to stderr. Exit 0 when the scenario ran to
// its end (a tool error or a JSON-RPC error is a line, not a failure), 2 on a bad scenario, 1 when
// the connection itself failed.
//
// Scenario:
//   {
//     "server": {"command": "...", "args": [...], "env": {...}, "cwd": "..."}
//            or {"url": "http://127.0.0.1:PORT/mcp", "headers": {"Authorization": "Bearer ..."}},
//     "elicitation": "accept" | "decline" | "cancel" | "none",   // default answer ("none": the
//                                       // client declares no elicitation capability at all)
//     "elicitation_content": {...},     // content sent with "accept" (default: filled from the
//                                       // requested schema: booleans true, enums their first value)
//     "timeout_ms": 30000,              // per request
//     "steps": [
//       {"op": "list_tools"},
//       {"op": "call", "name": "tool", "arguments": {...}, "elicitation": "decline",
//        "timeout_ms": 5000, "progress": true, "id": "label", "meta": {...},   // meta: _meta
//        "abort_after_ms": 3000, "abort_on_progress": true},  // abort the request then, or at
//                                       // its first progress notification (the SDK sends
//                                       // notifications/cancelled; this harness only:
//                                       // tests/mcp_clients.py's Python runner ignores them)
//       {"op": "ping"}, {"op": "sleep", "ms": 100}
//     ]
//   }
//
// Lines (every line has "event"; a step's lines carry "step", its index, and "id" when given):
//   {"event": "connected", "server": {name, version}, "capabilities": {...}}
//   {"event": "tools", "step": i, "tools": [{name, title, description, inputSchema, outputSchema,
//    annotations}]}
//   {"event": "elicitation", "step": i, "message": "...", "requestedSchema": {...}, "mode": "form",
//    "action": "accept", "content": {...}}
//   {"event": "progress", "step": i, "progress": n, "total": n, "message": "..."}
//   {"event": "notification", "method": "...", "params": {...}}
//   {"event": "result", "step": i, "name": "tool", "isError": bool, "content": [...],
//    "structuredContent": {...}, "ms": n}
//   {"event": "error", "step": i, "name": "tool", "code": n, "message": "...", "data": ..., "ms": n}
//   {"event": "done", "steps": n}
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const ACTIONS = new Set(["accept", "decline", "cancel"]);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function fail(code, message) {
  process.stderr.write(`mcp harness: ${message}\n`);
  process.exit(code);
}

function readScenario(argv) {
  const i = argv.indexOf("--scenario");
  if (i < 0 || i + 1 >= argv.length) {
    fail(2, "usage: node harness.mjs --scenario FILE|-");
  }
  const where = argv[i + 1];
  const text = where === "-" ? readFileSync(0, "utf8") : readFileSync(where, "utf8");
  try {
    return JSON.parse(text);
  } catch (e) {
    fail(2, `scenario is not JSON: ${e.message}`);
  }
}

// Content for an accepted form: the scenario's, or the requested schema's obvious "yes".
function fillContent(schema) {
  const content = {};
  for (const [key, prop] of Object.entries(schema?.properties ?? {})) {
    if (prop.const !== undefined) content[key] = prop.const;
    else if (Array.isArray(prop.enum) && prop.enum.length > 0) content[key] = prop.enum[0];
    else if (Array.isArray(prop.oneOf) && prop.oneOf.length > 0 && prop.oneOf[0].const !== undefined)
      content[key] = prop.oneOf[0].const;
    else if (prop.type === "boolean") content[key] = true;
    else if (prop.type === "number" || prop.type === "integer") content[key] = prop.default ?? 0;
    else if (prop.type === "string") content[key] = prop.default ?? "";
  }
  return content;
}

function makeTransport(server) {
  if (server.url) {
    return new StreamableHTTPClientTransport(new URL(server.url), {
      requestInit: { headers: server.headers ?? {} },
    });
  }
  if (!server.command) fail(2, "scenario.server needs a command or a url");
  return new StdioClientTransport({
    command: server.command,
    args: server.args ?? [],
    env: { ...process.env, ...(server.env ?? {}) },
    cwd: server.cwd,
    stderr: "inherit",
  });
}

async function main() {
  const scenario = readScenario(process.argv.slice(2));
  const defaultChoice = scenario.elicitation ?? "cancel";
  if (!ACTIONS.has(defaultChoice) && defaultChoice !== "none") fail(2, `bad elicitation choice ${defaultChoice}`);
  const timeout = scenario.timeout_ms ?? 30000;
  const steps = scenario.steps ?? [];
  let current = { step: -1, id: undefined, choice: defaultChoice };

  const capabilities = defaultChoice === "none" ? {} : { elicitation: { form: {} } };
  const client = new Client({ name: "callgate-mcp-test-harness", version: "0.1.0" }, { capabilities });
  if (defaultChoice !== "none") {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      const p = request.params;
      const action = current.choice;
      const line = {
        event: "elicitation",
        step: current.step,
        id: current.id,
        message: p.message,
        requestedSchema: p.requestedSchema,
        mode: p.mode ?? "form",
        action,
      };
      if (action === "accept") {
        line.content = scenario.elicitation_content ?? fillContent(p.requestedSchema);
        emit(line);
        return { action, content: line.content };
      }
      emit(line);
      return { action };
    });
  }
  client.fallbackNotificationHandler = async (n) => {
    emit({ event: "notification", step: current.step, method: n.method, params: n.params ?? {} });
  };

  try {
    await client.connect(makeTransport(scenario.server ?? {}), { timeout });
  } catch (e) {
    emit({ event: "connect_error", message: String(e?.message ?? e) });
    process.exit(1);
  }
  emit({ event: "connected", server: client.getServerVersion(), capabilities: client.getServerCapabilities() });

  for (const [i, step] of steps.entries()) {
    const choice = step.elicitation ?? defaultChoice;
    current = { step: i, id: step.id, choice };
    const started = Date.now();
    const tag = { step: i, id: step.id };
    try {
      if (step.op === "list_tools") {
        const { tools } = await client.listTools({}, { timeout: step.timeout_ms ?? timeout });
        emit({
          event: "tools",
          ...tag,
          tools: tools.map((t) => ({
            name: t.name,
            title: t.title,
            description: t.description,
            inputSchema: t.inputSchema,
            outputSchema: t.outputSchema,
            annotations: t.annotations,
          })),
        });
      } else if (step.op === "call") {
        const options = { timeout: step.timeout_ms ?? timeout };
        const abort = new AbortController();
        const aborted = () => abort.abort(new Error("aborted by the scenario"));
        if (step.abort_after_ms !== undefined || step.abort_on_progress) {
          options.signal = abort.signal;
        }
        if (step.abort_after_ms !== undefined) {
          setTimeout(aborted, step.abort_after_ms);
        }
        if (step.progress || step.abort_on_progress) {
          options.onprogress = (p) => {
            emit({ event: "progress", ...tag, ...p });
            if (step.abort_on_progress && !abort.signal.aborted) aborted();
          };
        }
        const params = { name: step.name, arguments: step.arguments ?? {} };
        if (step.meta) params._meta = step.meta;
        const r = await client.callTool(
          params,
          CallToolResultSchema,
          options,
        );
        emit({
          event: "result",
          ...tag,
          name: step.name,
          isError: r.isError === true,
          content: r.content,
          structuredContent: r.structuredContent,
          ms: Date.now() - started,
        });
      } else if (step.op === "ping") {
        await client.ping({ timeout: step.timeout_ms ?? timeout });
        emit({ event: "pong", ...tag, ms: Date.now() - started });
      } else if (step.op === "sleep") {
        await new Promise((resolve) => setTimeout(resolve, step.ms ?? 0));
      } else {
        fail(2, `unknown step op ${JSON.stringify(step.op)}`);
      }
    } catch (e) {
      emit({
        event: "error",
        ...tag,
        name: step.name,
        code: e?.code,
        message: String(e?.message ?? e),
        data: e?.data,
        ms: Date.now() - started,
      });
    }
  }
  emit({ event: "done", steps: steps.length });
  await client.close();
}

await main();
process.exit(0);
