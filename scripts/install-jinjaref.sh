#!/usr/bin/env bash
# Install the chat-template references of internal/tokenizer's tests (see tools/jinjaref/README.md):
#   - @huggingface/jinja, pinned by tools/jinjaref/package-lock.json, into .cache/jinjaref
#     (or $STOCKPOT_JINJAREF_DIR) with `npm ci --ignore-scripts`; only the npm registry is contacted;
#   - Python's Jinja2 (what transformers renders with): checked with `python3 -c 'import jinja2'`,
#     installed from Debian (python3-jinja2) when missing.
# Called by `make deps`. Idempotent: does nothing when the installed lock file matches and both load.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tools/jinjaref"
dest="${STOCKPOT_JINJAREF_DIR:-$root/.cache/jinjaref}"

log() { printf '[jinjaref] %s\n' "$*" >&2; }

command -v node >/dev/null || { log "node not found: install Node.js >= 18"; exit 1; }
command -v npm >/dev/null || { log "npm not found: install npm"; exit 1; }

probe='{"cases":[{"template":"{{ messages[0].content }}","context":{"messages":[{"role":"user","content":"ok"}]}}]}'

check_js() {
	printf '%s' "$probe" | STOCKPOT_JINJAREF_DIR="$dest" node "$src/render.mjs" 2>/dev/null |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const r=JSON.parse(s);if(!r.results||r.results[0].text!=="ok")process.exit(1);console.log("@huggingface/jinja "+r.version)})'
}

check_py() {
	printf '%s' "$probe" | python3 "$src/render.py" 2>/dev/null |
		python3 -c 'import json,sys;r=json.load(sys.stdin);assert r["results"][0]["text"]=="ok";print("Jinja2 "+r["version"])'
}

if ! command -v python3 >/dev/null || ! python3 -c 'import jinja2' 2>/dev/null; then
	if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
		log "installing python3-jinja2 (apt)"
		apt-get install -y -q python3-jinja2 >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q python3-jinja2 >/dev/null; }
	else
		log "Python's jinja2 is missing: install python3-jinja2 (apt) or Jinja2 (pip)"
		exit 1
	fi
fi
py="$(check_py)" || { log "python3 tools/jinjaref/render.py does not work"; exit 1; }

if cmp -s "$src/package-lock.json" "$dest/package-lock.json" && [[ -f "$dest/.installed" ]]; then
	if v="$(check_js)"; then
		log "up to date in $dest ($v, $py)"
		exit 0
	fi
	log "installed copy in $dest does not load; reinstalling"
fi

log "installing @huggingface/jinja into $dest (npm ci)"
mkdir -p "$dest"
rm -f "$dest/.installed"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
if ! v="$(check_js)"; then
	log "@huggingface/jinja was installed but does not load; run: node tools/jinjaref/render.mjs <<<'$probe'"
	exit 1
fi
touch "$dest/.installed"
log "ok: $v, $py"
