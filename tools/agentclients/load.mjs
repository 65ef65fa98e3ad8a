// load.mjs finds the client packages where scripts/install-agentclients.sh put them
// ($STOCKPOT_AGENTCLIENTS_DIR, default <repo>/.cache/agentclients), not next to these scripts:
// the scripts are tracked, the install is not. Packages load through require (every package
// here ships a CommonJS build), so one module graph serves them all.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const installDir = resolve(process.env.STOCKPOT_AGENTCLIENTS_DIR || join(here, '..', '..', '.cache', 'agentclients'));
const req = createRequire(join(installDir, 'package.json'));

// load returns the named package (or subpath), or throws naming the install step.
export async function load(name) {
  try {
    return req(name);
  } catch (e) {
    throw new Error(`cannot load ${name} from ${installDir} (run scripts/install-agentclients.sh or make deps): ${e.message}`);
  }
}

// installedVersion is the version in the installed package's package.json.
export function installedVersion(name) {
  return JSON.parse(readFileSync(join(installDir, 'node_modules', name, 'package.json'), 'utf8')).version;
}
