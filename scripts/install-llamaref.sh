#!/usr/bin/env bash
# Install the llama.cpp reference (node-llama-cpp, pinned in tools/llamaref/package-lock.json)
# into .cache/llamaref (or $STOCKPOT_LLAMAREF_DIR). Called by `make deps`.
#
# Reproducible: package.json and package-lock.json are copied from tools/llamaref and
# installed with `npm ci`. Only the npm registry is contacted:
#   --omit=optional   the GPU (CUDA, Vulkan) and other-platform prebuilt packages are optional
#                     dependencies of node-llama-cpp; the CPU linux-x64 one is a direct dependency.
#   --ignore-scripts  node-llama-cpp's postinstall only checks for / downloads binaries;
#                     the prebuilt ones from @node-llama-cpp/linux-x64 work without it.
# Idempotent: does nothing when the installed lock file matches and node-llama-cpp loads.
#
# One CPU variant is set aside: ggml picks the best of the prebuilt CPU libraries for the
# machine, and on a CPU with AMX that is libggml-cpu-sapphirerapids.so, whose AMX buffer type
# takes Q8_0 weights that an op of kimi-k3's graph then cannot run on: llama.cpp v0.4.0 aborts
# in its scheduler (ggml-backend.cpp:1294, GGML_ASSERT(*cur_backend_id != -1)). Without it ggml
# picks the best variant without AMX (cooperlake, icelake: the same AVX-512 kernels), on every
# machine alike, so the reference's numbers do not depend on whether the CPU has AMX.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tools/llamaref"
dest="${STOCKPOT_LLAMAREF_DIR:-$root/.cache/llamaref}"
want="$(node -e 'console.log(require(process.argv[1]).dependencies["node-llama-cpp"])' "$src/package.json")"

log() { printf '[llamaref] %s\n' "$*" >&2; }

command -v node >/dev/null || { log "node not found: install Node.js >= 20"; exit 1; }
command -v npm >/dev/null || { log "npm not found: install npm"; exit 1; }

check() {
	printf '{"requests":[{"op":"version"}]}' |
		STOCKPOT_LLAMAREF_DIR="$dest" node "$src/ref.mjs" 2>/dev/null |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const r=JSON.parse(s);if(r.node_llama_cpp!==process.argv[1])process.exit(1);console.log("node-llama-cpp "+r.node_llama_cpp+", llama.cpp "+r.llama_cpp_release+", "+r.build)})' "$want"
}

# set_aside moves the AMX CPU variant out of the directory ggml loads its variants from.
set_aside() {
	local bins="$dest/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
	if [[ -f "$bins/libggml-cpu-sapphirerapids.so" ]]; then
		mkdir -p "$dest/set-aside"
		mv "$bins/libggml-cpu-sapphirerapids.so" "$dest/set-aside/"
		log "set aside libggml-cpu-sapphirerapids.so (AMX: llama.cpp v0.4.0 aborts on kimi-k3's Q8_0 graph)"
	fi
}

if cmp -s "$src/package-lock.json" "$dest/package-lock.json" && [[ -f "$dest/.installed" ]]; then
	set_aside
	if v="$(check)"; then
		log "up to date in $dest ($v)"
		exit 0
	fi
	log "installed copy in $dest does not load; reinstalling"
fi

log "installing node-llama-cpp@$want into $dest (npm ci)"
mkdir -p "$dest"
rm -f "$dest/.installed"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
set_aside
if ! v="$(check)"; then
	log "node-llama-cpp was installed but does not load; run: node tools/llamaref/ref.mjs <<<'{\"requests\":[{\"op\":\"version\"}]}'"
	exit 1
fi
touch "$dest/.installed"
log "ok: $v"
