// Against a REAL sidecar: waiting for a confirmation on the WatchInvocation stream (no polling),
// traceparent taken from the caller's OpenTelemetry context (explicit value wins), and the
// executor's retry (a transient failure, then success, after the advised backoff: the sidecar
// refuses an attempt that comes too early, so a success proves the advice was honoured).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { Callgate, Dialect, FailureClass, OutcomeKind, State, ToolFailure, traceparentFor } from "../dist/index.js";
import { startSidecar } from "./sidecar.mjs";

let sidecar;
let cg;
before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  sidecar = await startSidecar();
  cg = new Callgate({ ...sidecar.targets, timeoutMs: 10_000 });
});
after(async () => {
  cg?.close();
  await sidecar?.stop();
  context.disable();
});

const EVENT = { title: "standup", start: "2026-07-20T09:00:00+00:00", duration_minutes: 15 };

async function events(session, invocationId) {
  return (await cg.gate.call("getInvocation", { invocationId, sessionId: session.sessionId })).events;
}

test("waitForConfirmation follows the WatchInvocation stream, not GetInvocation polls", async () => {
  const s = await cg.openSession({ tenant: "acme", subject: "alice" });
  const tools = await s.tools(Dialect.OpenAI);
  const o = await s.propose(tools, { id: "call_w1", name: "calendar__create_event", arguments: EVENT });
  assert.equal(o.kind, OutcomeKind.NeedsConfirmation);
  const polls = [];
  const original = cg.gate.call.bind(cg.gate);
  cg.gate.call = (method, ...rest) => {
    polls.push(method);
    return original(method, ...rest);
  };
  try {
    const t0 = Date.now();
    const waiting = s.waitForConfirmation(o.invocationId, { timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 300));
    await cg.confirmations.call("confirm", { invocationId: o.invocationId, digest: o.digest, confirmedBy: "alice" });
    assert.equal(await waiting, true);
    assert.ok(Date.now() - t0 < 10_000);
  } finally {
    cg.gate.call = original;
  }
  assert.deepEqual(polls, []); // no unary call at all while waiting: the stream carried the change
  // cancelled while waiting: the stream's terminal answer ends the wait with false
  const o2 = await s.propose(tools, { id: "call_w2", name: "calendar__create_event", arguments: { ...EVENT, title: "x" } });
  const waiting2 = s.waitForConfirmation(o2.invocationId, { timeoutMs: 20_000 });
  await cg.gate.call("cancel", { invocationId: o2.invocationId, sessionId: s.sessionId, reason: "test" });
  assert.equal(await waiting2, false);
});

test("traceparent from the caller's OpenTelemetry context; an explicit one wins", async () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const spanCtx = { traceId, spanId: "00f067aa0ba902b7", traceFlags: TraceFlags.SAMPLED, isRemote: false };
  const ctx = trace.setSpanContext(context.active(), spanCtx);
  assert.equal(traceparentFor(), undefined); // no active span: none sent
  const { s, o } = await context.with(ctx, async () => {
    assert.equal(traceparentFor(), `00-${traceId}-00f067aa0ba902b7-01`);
    const s = await cg.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI);
    const o = await s.propose(tools, { id: "call_t1", name: "calendar__create_event", arguments: EVENT });
    await cg.confirmations.call("confirm", { invocationId: o.invocationId, digest: o.digest, confirmedBy: "alice" });
    const r = await cg.executor("exec-1").run(o.invocationId, async () => ({ value: { event_id: "e1" }, externalResourceId: "e1" }));
    assert.equal(r.state, State.OBSERVED);
    return { s, o };
  });
  const evs = await events(s, o.invocationId);
  assert.ok(evs.length >= 8);
  assert.deepEqual([...new Set(evs.map((e) => e.traceId))], [traceId]); // one trace, the whole invocation
  const explicit = `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`;
  const o2 = await context.with(ctx, async () => {
    const tools = await s.tools(Dialect.OpenAI);
    return s.propose(tools, { id: "call_t2", name: "weather__get", arguments: { city: "Oslo", date: "2026-07-20" } }, { call: { traceparent: explicit } });
  });
  assert.deepEqual([...new Set((await events(s, o2.invocationId)).map((e) => e.traceId))], ["ab".repeat(16)]);
});

test("executor retry: a transient failure, then success after the advised backoff", async () => {
  const s = await cg.openSession({ tenant: "acme", subject: "alice" });
  const tools = await s.tools(Dialect.OpenAI);
  const o = await s.propose(tools, { id: "call_r1", name: "weather__get", arguments: { city: "Oslo", date: "2026-07-20" } });
  assert.equal(o.kind, OutcomeKind.Allowed);
  const seen = [];
  const r = await cg.executor("exec-1").run(o.invocationId, async (ctx) => {
    seen.push({ attempt: ctx.attemptNumber, at: Date.now() });
    if (seen.length === 1) throw new ToolFailure(FailureClass.TRANSIENT, "429 from upstream", undefined, 429);
    return { value: { forecast: "sunny" } };
  });
  assert.deepEqual(seen.map((x) => x.attempt), [1, 2]);
  assert.equal(r.attempts, 2);
  assert.equal(r.state, State.OBSERVED);
  assert.equal(JSON.parse(r.message).content.status, "ok");
  const failed = (await events(s, o.invocationId)).find((e) => e.data?.retry !== undefined && e.data.retry.allowed === true);
  assert.ok(failed, "the failed attempt's event carries the retry advice");
  const backoff = Number(failed.data.retry.backoff_ms);
  assert.ok(backoff > 0);
  assert.ok(seen[1].at - seen[0].at >= backoff - 5, `waited ${seen[1].at - seen[0].at} ms of ${backoff}`);
});
