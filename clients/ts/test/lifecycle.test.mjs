// The lifecycle helper against a REAL sidecar started by the test, with a scripted model (no
// network): allow, deny, confirm, rejection, idempotent replay, sidecar down. After every refusal
// the tool function must not have run.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  CallgateError,
  Callgate,
  ClientCode,
  Dialect,
  OutcomeKind,
  State,
  TransportError,
  idempotencyKey,
} from "../dist/index.js";
import { startSidecar } from "./sidecar.mjs";

/** A scripted model: each turn answers the tool calls it was scripted with (OpenAI shape). */
function scriptedModel(turns) {
  let i = 0;
  return {
    complete(tools) {
      const names = new Set(tools.map((t) => t.function.name));
      const turn = turns[i++] ?? [];
      for (const c of turn) assert.ok(names.has(c.name), `model used a tool it was not shown: ${c.name}`);
      return turn;
    },
  };
}

let sidecar;
let cg;
before(async () => {
  sidecar = await startSidecar();
  cg = new Callgate({ ...sidecar.targets, timeoutMs: 10_000 });
});
after(async () => {
  cg?.close();
  await sidecar?.stop();
});

/** The agent loop of one model turn: propose every call, run the allowed ones. */
async function turn(session, model, runs) {
  const tools = await session.tools(Dialect.OpenAI);
  const calls = model.complete(tools.definitions());
  const out = [];
  for (const call of calls) {
    const o = await session.propose(tools, call);
    let message = o.message;
    if (o.kind === OutcomeKind.Allowed && o.replayedMessage === undefined) {
      const r = await cg.executor("exec-1").run(o.invocationId, async (ctx) => {
        runs.push({ tool: ctx.toolName, args: ctx.arguments });
        return { value: { ok: true, echo: ctx.arguments } };
      });
      message = r.message;
    }
    out.push({ outcome: o, message });
  }
  return out;
}

describe("tools for a model call", () => {
  test("OpenAI-legal names map back; strict schemas; descriptions kept", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI);
    const names = tools.tools.map((t) => t.name).sort();
    // alice is a scheduler, not an admin: files.delete is hidden by policy (docs/POLICIES.md)
    assert.deepEqual(names, ["calendar__create_event", "weather__get"]);
    for (const t of tools.tools) {
      assert.match(t.name, /^[a-zA-Z0-9_-]{1,64}$/);
      assert.equal(tools.resolve(t.name).toolName, t.toolName);
      const fn = t.definition.function;
      assert.equal(fn.strict, true);
      assert.ok(!("$schema" in fn.parameters));
      assert.deepEqual([...fn.parameters.required].sort(), Object.keys(fn.parameters.properties).sort());
      assert.ok(fn.description.length > 0);
    }
    const cal = tools.resolve("calendar__create_event");
    assert.deepEqual([...cal.nullableOptional].sort(), ["/calendar_id", "/duration_minutes"]);
    const anth = await s.tools(Dialect.Anthropic);
    assert.ok(anth.definitions().every((d) => d.input_schema && !("$schema" in d.input_schema)));
    const mcp = await s.tools(Dialect.MCP);
    assert.ok(mcp.definitions().every((d) => d.inputSchema && !("outputSchema" in d)));
  });

  test("idempotency keys are deterministic and differ per tool call", () => {
    const p = { sessionId: "s", modelCallId: "m", toolCallId: "c1", toolName: "weather.get", toolVersion: "v1" };
    assert.equal(idempotencyKey(p), idempotencyKey({ ...p }));
    assert.notEqual(idempotencyKey(p), idempotencyKey({ ...p, toolCallId: "c2" }));
    assert.match(idempotencyKey(p), /^cgk1-[0-9a-f]{48}$/);
  });
});

describe("the lifecycle against a real sidecar", () => {
  test("allow: the tool runs once and its message goes back to the model", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const runs = [];
    const model = scriptedModel([
      [{ id: "call_w1", name: "weather__get", arguments: '{"city":"Paris","date":"2026-07-20"}' }],
    ]);
    const [r] = await turn(s, model, runs);
    assert.equal(r.outcome.kind, OutcomeKind.Allowed);
    assert.equal(runs.length, 1);
    assert.deepEqual(runs[0].args, { city: "Paris", date: "2026-07-20" });
    const msg = JSON.parse(r.message).content;
    assert.equal(msg.status, "ok");
    assert.equal(await s.result(r.outcome.invocationId), r.message);
  });

  test("the same tool call again is an idempotent replay: nothing runs twice", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI, { modelCallId: "m-replay" });
    const call = { id: "call_r1", name: "weather__get", arguments: '{"city":"Oslo","date":"2026-07-21"}' };
    const first = await s.propose(tools, call);
    assert.equal(first.kind, OutcomeKind.Allowed);
    let runs = 0;
    const done = await cg.executor("exec-1").run(first.invocationId, async () => {
      runs += 1;
      return { value: { t: 21 } };
    });
    const again = await s.propose(tools, call);
    assert.equal(again.kind, OutcomeKind.Allowed);
    assert.equal(again.invocationId, first.invocationId);
    assert.equal(again.replayedMessage, done.message);
    assert.equal(runs, 1);
  });

  test("deny: the model gets the refusal, nothing runs", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const runs = [];
    const model = scriptedModel([
      [
        {
          id: "call_d1",
          name: "calendar__create_event",
          // strict mode: optional calendar_id sent as null (dropped by the client)
          arguments: '{"calendar_id":null,"title":"offsite","start":"2026-07-20T09:00:00+00:00","duration_minutes":600}',
        },
      ],
    ]);
    const [r] = await turn(s, model, runs);
    assert.equal(r.outcome.kind, OutcomeKind.Denied);
    assert.deepEqual(runs, []);
    const msg = JSON.parse(r.message).content;
    assert.equal(msg.status, "denied");
    assert.ok(r.outcome.decision.policyIds.includes("calendar-max-duration"));
  });

  test("rejection: bad arguments are refused with a located violation, nothing runs", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const runs = [];
    const model = scriptedModel([
      [
        { id: "call_x1", name: "weather__get", arguments: '{"city":"Paris","date":"2026-07-20","extra":1}' },
        { id: "call_x2", name: "weather__get", arguments: '{"city":' },
        { id: "call_x3", name: "weather__get", arguments: '{"city":"Paris"}' },
      ],
    ]);
    const rs = await turn(s, model, runs);
    assert.deepEqual(
      rs.map((r) => r.outcome.kind),
      [OutcomeKind.Rejected, OutcomeKind.Rejected, OutcomeKind.Rejected],
    );
    assert.deepEqual(runs, []);
    for (const r of rs) {
      const msg = JSON.parse(r.message).content;
      assert.equal(msg.status, "rejected");
      assert.ok(msg.code.length > 0);
    }
    // A name the model was never shown (hallucinated, or the callgate name instead of the legal
    // one) is answered locally in the sidecar's own shape and code, with the names it may use.
    const tools = await s.tools(Dialect.OpenAI);
    for (const name of ["weather.get", "send_money"]) {
      const o = await s.propose(tools, { id: "call_x4", name, arguments: "{}" });
      assert.equal(o.kind, OutcomeKind.Rejected);
      assert.equal(o.rejection.code, "unknown_tool_version");
      const msg = JSON.parse(o.message);
      assert.equal(msg.tool_call_id, "call_x4");
      assert.deepEqual(Object.keys(msg.content), Object.keys(JSON.parse(rs[0].message).content));
      assert.equal(msg.content.code, "unknown_tool_version");
      assert.match(msg.content.message, new RegExp(`No tool named "${name}".*available: calendar__create_event, weather__get`));
    }
    // A repeated key is refused by the sidecar even where a strict-mode null is dropped (the
    // client must not re-serialize the arguments and keep one of the two values).
    const dup = await s.propose(tools, {
      id: "call_x5",
      name: "calendar__create_event",
      arguments: '{"title":"A","title":"B","start":"2026-07-20T09:00:00+08:00","duration_minutes":15,"calendar_id":null}',
    });
    assert.equal(dup.kind, OutcomeKind.Rejected);
    assert.equal(dup.rejection.code, "duplicate_key");
    assert.deepEqual(runs, []);
  });

  test("confirm: parked until the confirmer approves the digest, then runs", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI);
    const o = await s.propose(tools, {
      id: "call_c1",
      name: "calendar__create_event",
      arguments: '{"calendar_id":null,"title":"standup","start":"2026-07-20T09:00:00+00:00","duration_minutes":null}',
    });
    assert.equal(o.kind, OutcomeKind.NeedsConfirmation);
    assert.equal(JSON.parse(o.message).content.status, "needs_confirmation");
    // What an approver is shown: the sidecar's masked copy (nothing to mask here: the arguments).
    assert.equal(JSON.parse(new TextDecoder().decode(o.maskedArguments)).title, "standup");
    // It cannot run before the confirmation.
    let runs = 0;
    await assert.rejects(
      cg.executor("exec-1").run(o.invocationId, async () => {
        runs += 1;
        return { value: {} };
      }),
      (e) => e instanceof CallgateError && e.code.length > 0 && !e.code.startsWith("client_"),
    );
    assert.equal(runs, 0);
    // Not yet confirmed: the wait times out with a typed error.
    await assert.rejects(s.waitForConfirmation(o.invocationId, { timeoutMs: 300, pollMs: 50 }), (e) => e.code === ClientCode.ConfirmationTimeout);
    // Another process holding only the tool call id finds it (FindInvocation, ListParked).
    const found = await s.find(tools, "call_c1", "calendar__create_event");
    assert.equal(found.invocationId, o.invocationId);
    assert.equal(await s.find(tools, "call_nope", "calendar__create_event"), undefined);
    // A name the model was not shown is the client's own code (ClientCode), no call made.
    await assert.rejects(s.find(tools, "call_c1", "calendar.create_event"), (e) => e instanceof CallgateError && e.code === ClientCode.UnknownTool);
    assert.deepEqual((await s.listParked()).map((i) => i.proposalId), ["call_c1"]);
    // The confirmer UI (another listener) approves the exact digest while the agent waits.
    const waiting = s.waitForConfirmation(o.invocationId, { timeoutMs: 20_000, pollMs: 50 });
    const pending = await cg.confirmations.call("listPending", { tenant: "acme" });
    const p = pending.pending.find((x) => x.invocationId === o.invocationId);
    assert.ok(p, "parked invocation listed");
    assert.equal(p.digest, o.digest);
    await cg.confirmations.call("confirm", { invocationId: o.invocationId, digest: o.digest, confirmedBy: "alice" });
    assert.equal(await waiting, true);
    const r = await cg.executor("exec-1").run(o.invocationId, async (ctx) => {
      runs += 1;
      assert.equal(ctx.arguments.calendar_id, "primary");
      assert.equal(ctx.arguments.duration_minutes, 30);
      assert.ok(ctx.credential.split(".").length === 3);
      return { value: { event_id: "ev-1" }, externalResourceId: "ev-1" };
    });
    assert.equal(runs, 1);
    assert.equal(r.state, State.OBSERVED);
    assert.equal(JSON.parse(r.message).content.status, "ok");
  });

  test("confirm with a wrong digest: refused, and the wait ends with false", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI);
    const o = await s.propose(tools, {
      id: "call_c2",
      name: "calendar__create_event",
      arguments: { title: "lunch", start: "2026-07-20T12:00:00+00:00" },
    });
    assert.equal(o.kind, OutcomeKind.NeedsConfirmation);
    await assert.rejects(
      cg.confirmations.call("confirm", { invocationId: o.invocationId, digest: "sha256:" + "0".repeat(64), confirmedBy: "mallory" }),
      (e) => e instanceof CallgateError && e.code === "confirmation_digest_mismatch",
    );
    assert.equal(await s.waitForConfirmation(o.invocationId, { timeoutMs: 5000, pollMs: 50 }), false);
  });

  test("typed errors carry the stable code from ErrorInfo", async () => {
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    await assert.rejects(s.result("no-such-invocation"), (e) => {
      assert.ok(e instanceof CallgateError);
      assert.equal(e.code, "invocation_not_found");
      assert.equal(typeof e.grpcCode, "number");
      return true;
    });
  });
});

describe("sidecar down", () => {
  test("every step raises a typed error and nothing runs", async () => {
    const down = new Callgate({
      agent: `unix:${sidecar.tmp}/nobody-listens.sock`,
      executor: `unix:${sidecar.tmp}/nobody-listens-x.sock`,
      timeoutMs: 2000,
    });
    try {
      const t0 = Date.now();
      await assert.rejects(down.openSession({ tenant: "acme", subject: "alice" }), (e) => {
        assert.ok(e instanceof TransportError, String(e));
        assert.ok([ClientCode.Unavailable, ClientCode.DeadlineExceeded].includes(e.code), e.code);
        return true;
      });
      assert.ok(Date.now() - t0 < 5000);
      let runs = 0;
      await assert.rejects(
        down.executor("exec-1").run("inv-1", async () => {
          runs += 1;
          return { value: {} };
        }),
        (e) => e instanceof TransportError,
      );
      assert.equal(runs, 0);
    } finally {
      down.close();
    }
  });

  test("the sidecar stops between propose and execution: typed error, nothing runs", async () => {
    const other = await startSidecar();
    const c = new Callgate({ ...other.targets, timeoutMs: 2000 });
    try {
      const s = await c.openSession({ tenant: "acme", subject: "alice" });
      const tools = await s.tools(Dialect.OpenAI);
      const o = await s.propose(tools, { id: "call_k1", name: "weather__get", arguments: '{"city":"Rome","date":"2026-07-20"}' });
      assert.equal(o.kind, OutcomeKind.Allowed);
      await other.stop();
      let runs = 0;
      await assert.rejects(
        c.executor("exec-1").run(o.invocationId, async () => {
          runs += 1;
          return { value: {} };
        }),
        (e) => e instanceof TransportError,
      );
      assert.equal(runs, 0);
      await assert.rejects(s.propose(tools, { id: "call_k2", name: "weather__get", arguments: "{}" }), (e) => e instanceof TransportError);
    } finally {
      c.close();
      await other.stop().catch(() => {});
    }
  });
});

describe("examples/node/agent.mjs", () => {
  test("runs against the sidecar with its scripted model", async () => {
    const { execFile } = await import("node:child_process");
    const { ROOT } = await import("./sidecar.mjs");
    const out = await new Promise((res, rej) =>
      execFile(process.execPath, [`${ROOT}/examples/node/agent.mjs`], { env: { ...process.env, CALLGATE_RUN_DIR: sidecar.tmp }, timeout: 60_000 }, (e, so, se) =>
        e ? rej(new Error(`${e}\n${so}\n${se}`)) : res(so),
      ),
    );
    assert.match(out, /weather__get: allowed/);
    assert.match(out, /calendar__create_event: allowed/);
    assert.match(out, /calendar__create_event: denied/);
    assert.match(out, /weather__get: rejected/);
    assert.match(out, /\["ok","ok","denied","rejected"\]/);
  });
});
