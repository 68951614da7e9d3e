// A sidecar that is slow past the deadline or answers malformed data: the client raises a typed
// error and runs nothing. The faulty peer is a raw gRPC server (grpc-js) on a Unix socket that
// speaks the Gate's method paths with hand-made bytes: the fault is on the wire, not in a mock of
// the client.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  CallgateError,
  Callgate,
  ClientCode,
  Dialect,
  MalformedResponseError,
  TransportError,
  pb,
} from "../dist/index.js";

let server;
let tmp;
let mode = "ok";
const raw = { serialize: (b) => b, deserialize: (b) => b };
const unary = (name, handler) => ({
  [name]: {
    path: `/callgate.v1.Gate/${name}`,
    requestStream: false,
    responseStream: false,
    requestSerialize: raw.serialize,
    requestDeserialize: raw.deserialize,
    responseSerialize: raw.serialize,
    responseDeserialize: raw.deserialize,
  },
  handler,
});

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), "cg-ts-fault-"));
  server = new grpc.Server();
  const defs = {};
  const impl = {};
  const add = (name, fn) => {
    const u = unary(name, fn);
    defs[name] = u[name];
    impl[name] = u.handler;
  };
  add("OpenSession", (_call, cb) => cb(null, Buffer.from(toBinary(pb.OpenSessionResponseSchema, create(pb.OpenSessionResponseSchema, { sessionId: "s-1" })))));
  add("ListTools", (_call, cb) =>
    cb(
      null,
      Buffer.from(
        toBinary(
          pb.ListToolsResponseSchema,
          create(pb.ListToolsResponseSchema, {
            tools: [{ name: "weather.get", version: "v1", description: "d", inputSchemaJson: '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}' }],
          }),
        ),
      ),
    ),
  );
  add("Propose", (_call, cb) => {
    switch (mode) {
      case "garbage":
        return cb(null, Buffer.from([0xff, 0xff, 0xff, 0xff]));
      case "no_decision":
        return cb(null, Buffer.from(toBinary(pb.ProposeResponseSchema, create(pb.ProposeResponseSchema, { invocationId: "i-1" }))));
      case "unknown_effect":
        return cb(null, Buffer.from(toBinary(pb.ProposeResponseSchema, create(pb.ProposeResponseSchema, { invocationId: "i-1", decision: { effect: 7 } }))));
      case "unset_effect":
        return cb(null, Buffer.from(toBinary(pb.ProposeResponseSchema, create(pb.ProposeResponseSchema, { invocationId: "i-1", decision: {} }))));
      case "bad_details": {
        const md = new grpc.Metadata();
        md.set("grpc-status-details-bin", Buffer.from([0x0a, 0xff]));
        return cb({ code: grpc.status.PERMISSION_DENIED, details: "nope", metadata: md });
      }
      case "slow":
        return setTimeout(() => cb(null, Buffer.alloc(0)), 3000);
      default:
        return cb(null, Buffer.alloc(0));
    }
  });
  server.addService(defs, impl);
  await new Promise((res, rej) => server.bindAsync(`unix:${tmp}/agent.sock`, grpc.ServerCredentials.createInsecure(), (e) => (e ? rej(e) : res())));
});
after(() => {
  server?.forceShutdown();
  rmSync(tmp, { recursive: true, force: true });
});

async function proposeOnce() {
  const c = new Callgate({ agent: `unix:${tmp}/agent.sock`, timeoutMs: 500 });
  try {
    const s = await c.openSession({ tenant: "acme", subject: "alice" });
    const tools = await s.tools(Dialect.OpenAI);
    return await s.propose(tools, { id: "c1", name: "weather__get", arguments: '{"city":"Paris"}' });
  } finally {
    c.close();
  }
}

for (const [m, check] of [
  ["garbage", (e) => e instanceof MalformedResponseError],
  ["no_decision", (e) => e instanceof MalformedResponseError],
  ["unknown_effect", (e) => e instanceof MalformedResponseError],
  ["unset_effect", (e) => e instanceof MalformedResponseError],
  ["bad_details", (e) => e instanceof TransportError && e.grpcCode === grpc.status.PERMISSION_DENIED],
  ["slow", (e) => e instanceof TransportError && e.code === ClientCode.DeadlineExceeded],
]) {
  test(`a ${m} answer to Propose is a typed error, never an outcome`, async () => {
    mode = m;
    let outcome;
    await assert.rejects(
      (async () => {
        outcome = await proposeOnce();
      })(),
      (e) => {
        assert.ok(e instanceof CallgateError, String(e));
        assert.ok(check(e), `${e.name} ${e.code}`);
        return true;
      },
    );
    assert.equal(outcome, undefined);
  });
}
