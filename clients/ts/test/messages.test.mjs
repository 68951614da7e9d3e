// The TypeScript client's model-facing messages, byte for byte those of the Python client: both
// test suites read tests/data/client-messages.json (tests/test_client_messages.py is the other).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { NOT_LISTED, confirmMessage, deniedMessage, notListedText, rejectedMessage } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const { cases } = JSON.parse(readFileSync(join(here, "../../../tests/data/client-messages.json"), "utf8"));

function messageOf(c) {
  if (c.kind === "denied") return deniedMessage(c.tool_call_id, c.reasons, c.error_code);
  if (c.kind === "needs_confirmation") return confirmMessage(c.tool_call_id, c.expires_at);
  if (c.kind === "not_listed") return rejectedMessage(c.tool_call_id, NOT_LISTED, notListedText(c.name, c.available), []);
  assert.equal(c.kind, "rejected");
  return rejectedMessage(c.tool_call_id, c.code, c.message, c.violations);
}

for (const c of cases) {
  test(`message of ${c.kind} ${c.tool_call_id} matches the shared fixture`, () => {
    assert.equal(messageOf(c), c.expected);
  });
}

test("the fixture covers every outcome with a message", () => {
  assert.deepEqual([...new Set(cases.map((c) => c.kind))].sort(), ["denied", "needs_confirmation", "not_listed", "rejected"]);
});
