// versions.mjs prints the installed versions of the client packages (one JSON line), or fails
// when one does not load. scripts/install-agentclients.sh uses it as its health check.
import { load, installedVersion } from './load.mjs';

const names = ['openai', '@openai/agents', '@langchain/openai', '@langchain/core', 'zod'];
const out = {};
for (const n of names) {
  await load(n);
  out[n] = installedVersion(n);
}
out.node = process.version;
console.log(JSON.stringify(out));
