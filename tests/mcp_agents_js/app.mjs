// An application written as the OpenAI Agents SDK for TypeScript documents its MCP servers
// (https://openai.github.io/openai-agents-js/guides/mcp/): an `MCPServerStdio` launching
// `callgate mcp serve` with the SDK's defaults (its 5 s `clientSessionTimeoutSeconds`), given to
// an `Agent` through `mcpServers`, and `run(agent, input)`. The model is the SDK's own
// `ScriptedModel` (@openai/agents-core/testing): one tool call per turn, as the scenario lists
// them, then a final message. Driven by tests/test_mcp_openai_agents_js.py.
//
//   node app.mjs '<scenario JSON>'
//   scenario: {"command": "...", "args": [...], "cwd": "...", "env": {...},
//              "calls": [{"name": "up__lookup", "arguments": {...}}, ...],
//              "sessionTimeoutSeconds": 60}   (optional: the SDK's default, 5 s, when absent)
//
// Prints one JSON line per event: {"event": "connected", "seconds": s}, {"event": "tools",
// "names": [...]}, {"event": "output", "name": ..., "output": "<what the model gets>"} per call,
// {"event": "final", "output": ...}; an error ends it with {"event": "error", "message": ...}.
import { Agent, MCPServerStdio, run } from '@openai/agents';
import { ScriptedModel, assistantMessage, functionCall } from '@openai/agents-core/testing';

const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const scenario = JSON.parse(process.argv[2]);

const server = new MCPServerStdio({
  name: 'callgate',
  command: scenario.command,
  args: scenario.args,
  cwd: scenario.cwd,
  env: scenario.env,
  ...(scenario.sessionTimeoutSeconds ? { clientSessionTimeoutSeconds: scenario.sessionTimeoutSeconds } : {}),
});
try {
  const t0 = Date.now();
  await server.connect();
  say({ event: 'connected', seconds: (Date.now() - t0) / 1000 });
  say({ event: 'tools', names: (await server.listTools()).map((t) => t.name) });
  const turns = scenario.calls.map((c, i) => [
    functionCall(c.name, c.arguments, { callId: `call_${i + 1}` }),
  ]);
  const model = new ScriptedModel([...turns, [assistantMessage('done')]]);
  const agent = new Agent({
    name: 'assistant',
    instructions: 'Use the tools.',
    model,
    mcpServers: [server],
  });
  const result = await run(agent, 'go', { maxTurns: turns.length + 2 });
  const names = new Map(scenario.calls.map((c, i) => [`call_${i + 1}`, c.name]));
  for (const item of result.newItems) {
    if (item.type === 'tool_call_output_item') {
      const output = typeof item.output === 'string' ? item.output : JSON.stringify(item.output);
      say({ event: 'output', name: names.get(item.rawItem.callId), output });
    }
  }
  model.assertComplete();
  say({ event: 'final', output: result.finalOutput });
} catch (e) {
  say({ event: 'error', message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
} finally {
  await server.close();
}
