// A Node agent loop gated by callgate, with a scripted model so it runs offline.
//
//   scripts/serve                       # terminal 1: the sidecar on the example policies
//   scripts/node-client build           # once: installs the locked npm deps, builds clients/ts
//   node examples/node/agent.mjs        # terminal 2
//
// CALLGATE_RUN_DIR overrides the socket directory (default: var/run of this checkout, where
// scripts/serve listens). The user "alice" comes from the runtime's own authentication, never
// from the model.
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Callgate, Dialect, OutcomeKind } from "../../clients/ts/dist/index.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const run = process.env.CALLGATE_RUN_DIR ?? resolve(root, "var/run");
const cg = new Callgate({
  agent: `unix:${run}/agent.sock`,
  executor: `unix:${run}/executor.sock`,
  confirmer: `unix:${run}/confirmer.sock`, // only for the demo's stand-in confirmer below
});

// The scripted model: one turn of tool calls, then a final answer. A real model plugs in here:
// pass `tools.definitions()` as `tools` to the provider (OpenAI-style function definitions in
// strict mode) and return the provider's tool calls as {id, name, arguments}.
const script = [
  [
    { id: "call_1", name: "weather__get", arguments: '{"city":"Paris","date":"tomorrow"}' },
    { id: "call_2", name: "calendar__create_event", arguments: '{"calendar_id":null,"title":"Picnic","start":"2026-07-20T12:00:00+02:00","duration_minutes":90}' },
    { id: "call_3", name: "calendar__create_event", arguments: '{"calendar_id":null,"title":"Hackathon","start":"2026-07-21T09:00:00+02:00","duration_minutes":600}' },
    { id: "call_4", name: "weather__get", arguments: '{"city":"Paris"}' },
  ],
];
const model = (_messages, _tools) => script.shift() ?? [];

// The tools' real implementations run only through the executor path.
const implementations = {
  "weather.get": async (args) => ({ value: { city: args.city, date: args.date, forecast: "sunny", high_c: 27 } }),
  "calendar.create_event": async (args) => ({ value: { event_id: `ev-${args.title}` }, externalResourceId: `ev-${args.title}` }),
};

const session = await cg.openSession({ tenant: "acme", subject: "alice", timezone: "Europe/Paris" });
const messages = [{ role: "user", content: "Plan a picnic in Paris tomorrow if the weather is good." }];
for (;;) {
  const tools = await session.tools(Dialect.OpenAI);
  const calls = model(messages, tools.definitions());
  if (calls.length === 0) break;
  for (const call of calls) {
    let outcome = await session.propose(tools, call);
    let message = outcome.message;
    if (outcome.kind === OutcomeKind.NeedsConfirmation) {
      // Demo only: the confirmer UI (another listener, the user's own screen) approves the exact
      // digest. Here the script stands in for it.
      await cg.confirmations.call("confirm", { invocationId: outcome.invocationId, digest: outcome.digest, confirmedBy: "alice" });
      if (await session.waitForConfirmation(outcome.invocationId, { timeoutMs: 60_000 })) {
        outcome = { ...outcome, kind: OutcomeKind.Allowed, replayedMessage: undefined };
      }
    }
    if (outcome.kind === OutcomeKind.Allowed) {
      message = outcome.replayedMessage ?? (await cg.executor("example-executor").run(outcome.invocationId, (ctx) => implementations[ctx.toolName](ctx.arguments))).message;
    }
    console.log(`${call.name}: ${outcome.kind}`);
    messages.push(JSON.parse(message));
  }
}
console.log(JSON.stringify(messages.slice(1).map((m) => m.content.status)));
cg.close();
