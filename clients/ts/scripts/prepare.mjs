// npm's `prepare` step: builds dist/ wherever npm runs it, so no manual build is needed:
// `npm install` / `npm ci` in this folder, `npm pack` (the tarball carries dist/), and
// `npm install /path/to/clients/ts` from another project. npm links such a folder and installs
// none of its dependencies there, so they are installed here first, exactly from the lock.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
const run = (args) => execFileSync(process.execPath, args, { cwd: here, stdio: "inherit" });

if (!existsSync(tsc) || !existsSync(join(here, "node_modules", "@grpc", "grpc-js"))) {
  const npm = process.env.npm_execpath;
  if (!npm) throw new Error("prepare.mjs runs as npm's prepare script (npm_execpath is not set)");
  run([npm, "ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]);
}
run([tsc, "-p", "tsconfig.json"]);
