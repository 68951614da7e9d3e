// Starts a REAL callgate sidecar (`python -m callgate serve`) with a temporary config and the
// repo's policies/, and waits until it is SERVING (a first OpenSession-free health probe: the
// Gate's ListTools with an unknown session answers a typed error once the server is up).
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Callgate } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = process.env.CALLGATE_ROOT ?? resolve(here, "../../..");
export const PYTHON = process.env.CALLGATE_PYTHON ?? join(ROOT, ".venv/bin/python");

export async function startSidecar() {
  const tmp = mkdtempSync(join(tmpdir(), "cg-ts-"));
  const cfg = join(tmp, "callgate.toml");
  writeFileSync(
    cfg,
    `
[server]
agent = { socket = "${tmp}/agent.sock" }
confirmer = { socket = "${tmp}/confirmer.sock" }
authorizer = { socket = "${tmp}/authorizer.sock" }
executor = { socket = "${tmp}/executor.sock" }
[policy]
dir = "${ROOT}/policies"
watch = false
[store]
path = "${tmp}/events.db"
[idempotency]
path = "${tmp}/idempotency.db"
`,
  );
  const log = join(tmp, "log");
  const proc = spawn(PYTHON, ["-m", "callgate", "serve", "--config", cfg], {
    cwd: ROOT,
    env: { ...process.env, PYTHONPATH: ROOT },
    stdio: ["ignore", "ignore", openSync(log, "w")],
  });
  let exited = null;
  proc.on("exit", (code) => {
    exited = code;
  });
  const targets = {
    agent: `unix:${tmp}/agent.sock`,
    executor: `unix:${tmp}/executor.sock`,
    confirmer: `unix:${tmp}/confirmer.sock`,
  };
  const probe = new Callgate({ ...targets, timeoutMs: 1000 });
  const until = Date.now() + 60_000;
  try {
    for (;;) {
      if (exited !== null) throw new Error(`sidecar exited ${exited}:\n${readFileSync(log, "utf8")}`);
      try {
        await probe.openSession({ tenant: "probe", subject: "probe" });
        break;
      } catch (e) {
        if (Date.now() > until) throw new Error(`sidecar not serving: ${e}\n${readFileSync(log, "utf8")}`);
        await new Promise((r) => setTimeout(r, 150));
      }
    }
  } finally {
    probe.close();
  }
  return {
    targets,
    tmp,
    async stop() {
      if (exited === null) {
        const done = new Promise((r) => proc.once("exit", r));
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
        await done;
        clearTimeout(t);
      }
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}
