// The one tool-name rule, read from the fixture the Python suite, the importer, `check` and the MCP
// gateway tests read too (tests/data/tool_names.json; tests/test_toolnames.py is the Python side).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Dialect, gatedTool, isToolName, LEGAL_NAME, wireName, wireNames } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const fixture = JSON.parse(readFileSync(join(here, "../../../tests/data/tool_names.json"), "utf8"));

test("every imported name is a callgate name with the fixture's model-facing name", () => {
  for (const t of fixture.tools) {
    assert.ok(isToolName(t.name), t.name);
    assert.equal(wireName(t.name), t.wire, t.upstream_name);
    assert.match(t.wire, LEGAL_NAME);
  }
});

test("the list's names are the fixture's, whatever order ListTools gives", () => {
  const tools = fixture.tools.map((t) => ({ name: t.name, version: "v1" }));
  for (const order of [tools, [...tools].reverse()]) {
    const names = wireNames(order);
    for (const t of fixture.tools) assert.equal(names.get(`${t.name}@v1`), t.wire);
  }
});

test("a second version of one name gets the fixture's name", () => {
  const v = fixture.versions;
  const names = wireNames([...v.shown].reverse().map((version) => ({ name: v.name, version })));
  for (const version of v.shown) assert.equal(names.get(`${v.name}@${version}`), v.wire[version]);
});

test("names outside the rule are refused", () => {
  for (const n of fixture.not_callgate_names) assert.equal(isToolName(n), false, n);
});

test("the Python client's form weather__get is this client's form (issue 28: was weather_get)", () => {
  const spec = { name: "weather.get", version: "v1", description: "", inputSchemaJson: "{}", outputSchemaJson: "" };
  assert.equal(gatedTool(spec, Dialect.OpenAI).name, "weather__get");
});
