#!/usr/bin/env bash
# Install the agent client libraries that internal/clienttest drives against a real
# `stockpot serve` (the OpenAI Agents SDK, LangChain's ChatOpenAI and the openai package,
# pinned in tools/agentclients/package-lock.json) into .cache/agentclients
# (or $STOCKPOT_AGENTCLIENTS_DIR). Called by `make deps`.
#
# Reproducible: package.json and package-lock.json are copied from tools/agentclients and
# installed with `npm ci --ignore-scripts` (none of these packages needs an install script).
# Only the npm registry is contacted.
# Idempotent: does nothing when the installed lock file matches and the packages load.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tools/agentclients"
dest="${STOCKPOT_AGENTCLIENTS_DIR:-$root/.cache/agentclients}"

log() { printf '[agentclients] %s\n' "$*" >&2; }

command -v node >/dev/null || { log "node not found: install Node.js >= 20"; exit 1; }
command -v npm >/dev/null || { log "npm not found: install npm"; exit 1; }

# check prints the loaded versions, or fails when a package does not load.
check() {
	STOCKPOT_AGENTCLIENTS_DIR="$dest" node "$src/versions.mjs"
}

if cmp -s "$src/package-lock.json" "$dest/package-lock.json" && [[ -f "$dest/.installed" ]]; then
	if v="$(check 2>/dev/null)"; then
		log "up to date in $dest ($v)"
		exit 0
	fi
	log "installed copy in $dest does not load; reinstalling"
fi

log "installing tools/agentclients into $dest (npm ci)"
mkdir -p "$dest"
rm -f "$dest/.installed"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# engine-strict off: openai 7 and @langchain/openai declare node >= 22; they run on 20 (the
# client tests prove it) and the machines here ship 20.
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --engine-strict=false)
if ! v="$(check)"; then
	log "installed, but the packages do not load: STOCKPOT_AGENTCLIENTS_DIR=$dest node tools/agentclients/versions.mjs"
	exit 1
fi
touch "$dest/.installed"
log "ok: $v"
