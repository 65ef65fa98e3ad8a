#!/usr/bin/env bash
# Build llama.cpp natively (Release, -march=native) for speed comparisons.
#
# The source is the exact llama.cpp that node-llama-cpp ships (its git bundle),
# so the native binaries and the node reference (tools/llamaref) run the same code.
# The prebuilt node-llama-cpp libraries are generic x86-64 variants and are slower
# than a native build, so speed ratios must be taken against these binaries.
#
# Outputs (all under .cache/, which is gitignored):
#   .cache/llama.cpp-src     clone of the bundle
#   .cache/llama.cpp-build   cmake build dir; binaries in .cache/llama.cpp-build/bin/
#
# Idempotent: an existing clone at the bundle's commit is reused and cmake only
# rebuilds what changed. Targets: llama-bench, llama-batched-bench, llama-server, and
# llama-cli unless LLAMA_NATIVE_NO_CLI=1. No network access is needed for llama.cpp itself
# (no CURL, no OpenSSL, no web UI); cmake and g++ are installed with apt-get where missing
# (a fresh machine has no cmake).
#
# Environment:
#   LLAMA_BUNDLE   path to gitRelease.bundle (default: from .cache/llamaref, see `make deps`)
#   JOBS           parallel compile jobs (default: nproc)
#   LLAMA_NATIVE_TARGETS  override the target list (space separated)
#   LLAMA_NATIVE_ISA      "avx2": build for an AVX2-only x86-64 (AVX2, FMA, F16C, BMI2; no
#                         AVX-512, no AMX) into .cache/llama.cpp-build-avx2, the peer of
#                         `make bench-vs-llama-avx2`, which runs Stockpot with AVX-512 off too
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$root/.cache"
src="$cache/llama.cpp-src"
build="$cache/llama.cpp-build"
isa="${LLAMA_NATIVE_ISA:-native}"
case "$isa" in
native) ;;
avx2) build="$cache/llama.cpp-build-avx2" ;;
*)
	printf 'build-llama-native: LLAMA_NATIVE_ISA=%s, want native or avx2\n' "$isa" >&2
	exit 2
	;;
esac
jobs="${JOBS:-$(nproc)}"

log() { printf '[build-llama-native %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The build tools, from apt where missing: cmake is absent on a fresh machine.
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
if [[ ${#need[@]} -gt 0 ]]; then
	sudo=""
	[[ "$(id -u)" -ne 0 ]] && sudo="sudo"
	log "installing ${need[*]} with apt-get"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	for t in "${need[@]}"; do
		command -v "$t" >/dev/null 2>&1 || { log "apt-get did not install $t"; exit 1; }
	done
fi

bundle="${LLAMA_BUNDLE:-}"
if [[ -z "$bundle" ]]; then
	refdir="${STOCKPOT_LLAMAREF_DIR:-$cache/llamaref}"
	bundle="$refdir/node_modules/node-llama-cpp/llama/gitRelease.bundle"
fi
if [[ ! -f "$bundle" ]]; then
	log "no llama.cpp bundle at $bundle"
	log "run \"make deps\" first (or set LLAMA_BUNDLE=/path/to/gitRelease.bundle)"
	exit 1
fi

want="$(git bundle list-heads "$bundle" | awk '$2=="HEAD"{print $1; exit}')"
if [[ -z "$want" ]]; then
	want="$(git bundle list-heads "$bundle" | awk '{print $1; exit}')"
fi
log "bundle $bundle at commit $want"

mkdir -p "$cache"
if [[ -d "$src/.git" ]] && [[ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" == "$want" ]]; then
	log "source already at $want: $src"
else
	log "cloning bundle into $src"
	rm -rf "$src.tmp"
	git -c advice.detachedHead=false clone --quiet "$bundle" "$src.tmp"
	git -c advice.detachedHead=false -C "$src.tmp" checkout --quiet --detach "$want"
	rm -rf "$src"
	mv "$src.tmp" "$src"
	# A new source tree invalidates the old build directory.
	rm -rf "$build"
fi

if [[ -n "${LLAMA_NATIVE_TARGETS:-}" ]]; then
	read -r -a targets <<<"$LLAMA_NATIVE_TARGETS"
else
	# llama-bench first: it is what the speed ratios use, and it is the cheapest.
	# llama-batched-bench measures decode at several parallel streams.
	targets=(llama-bench llama-batched-bench llama-server)
	[[ "${LLAMA_NATIVE_NO_CLI:-0}" == 1 ]] || targets+=(llama-cli)
fi

# AMX is off unless LLAMA_NATIVE_AMX=1: on the AMX machines we run on (VMs), ggml's AMX
# mul_mat segfaults in llama-bench for Q8_0/Q4_K/Q6_K files, and Stockpot has no AMX kernels,
# so the ratios compare AVX-512 (VNNI) code with AVX-512 code. GCC lets an explicit -mno-*
# win over what -march=native turns on.
cflags=""
[[ "${LLAMA_NATIVE_AMX:-0}" == 1 ]] || cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
isaflags=(-DGGML_NATIVE=ON)
if [[ "$isa" == avx2 ]]; then
	# What an AVX2-only machine (Haswell to Zen 3) builds with -march=native: ggml's AVX2
	# kernels, with every AVX-512 and AMX path off.
	cflags=""
	isaflags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
		-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF
		-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
config=(
	-DCMAKE_BUILD_TYPE=Release
	"${isaflags[@]}"
	"-DCMAKE_C_FLAGS=$cflags"
	"-DCMAKE_CXX_FLAGS=$cflags"
	-DBUILD_SHARED_LIBS=OFF
	-DLLAMA_BUILD_TESTS=OFF
	-DLLAMA_BUILD_EXAMPLES=OFF
	-DLLAMA_BUILD_APP=OFF
	-DLLAMA_BUILD_TOOLS=ON
	-DLLAMA_BUILD_SERVER=ON
	-DLLAMA_BUILD_UI=OFF
	-DLLAMA_USE_PREBUILT_UI=OFF
	-DLLAMA_OPENSSL=OFF
	-DLLAMA_CURL=OFF
	-DGGML_CCACHE=OFF
)
# A build configured with other options is reconfigured from scratch.
stamp="$build/stockpot-configure-args"
if [[ -f "$build/CMakeCache.txt" ]] && [[ "$(cat "$stamp" 2>/dev/null)" != "${config[*]}" ]]; then
	log "configure options changed; rebuilding $build from scratch"
	rm -rf "$build"
fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
	log "configuring (Release, $isa: ${isaflags[*]}${cflags:+, $cflags}, static, no curl/openssl/ui)"
	mkdir -p "$build"
	cmake -S "$src" -B "$build" "${config[@]}" >"$build.configure.log" 2>&1 || {
		log "cmake configure failed; see $build.configure.log"
		tail -n 30 "$build.configure.log" >&2
		exit 1
	}
	mv "$build.configure.log" "$build/configure.log"
	printf '%s' "${config[*]}" >"$stamp"
fi

start=$(date +%s)
for t in "${targets[@]}"; do
	log "building $t with $jobs jobs"
	t0=$(date +%s)
	cmake --build "$build" --config Release --target "$t" -j "$jobs" 2>&1 |
		grep --line-buffered -E '^\[ *[0-9]+%\]|error|Error' >&2 || true
	if [[ ! -x "$build/bin/$t" ]]; then
		log "building $t failed; rerun: cmake --build $build --target $t"
		exit 1
	fi
	log "built $t in $(($(date +%s) - t0))s"
done
printf '%s\n' "$want" >"$build/bin/COMMIT"
log "done in $(($(date +%s) - start))s; binaries in $build/bin"
