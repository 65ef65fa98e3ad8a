# Stockpot's build and test entry points. `make test` is what CI (.ci/run) runs.
GO ?= go
FUZZTIME ?= 6s

.PHONY: test sysdeps vet unit fuzz build bench bench-vs-llama bench-vs-llama-avx2 bench-hybrid-vs-llama bench-pd

## test: install what the tests need, then vet, unit tests and short fuzz runs.
test: deps sysdeps vet unit fuzz
	@echo "== done $$(date +%T)"

## sysdeps: redis-server and chromium from apt, where missing.
sysdeps:
	@echo "== sysdeps $$(date +%T)"
	scripts/install-sysdeps.sh

build:
	$(GO) build -o bin/stockpot ./cmd/stockpot

vet:
	@echo "== vet $$(date +%T)"
	@bad=$$(gofmt -l $$(git ls-files '*.go' | grep -v /testdata/)); if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet ./...

unit:
	@echo "== unit $$(date +%T)"
	$(GO) test -count=1 -timeout 75m ./...

## fuzz: a short run of every parser of outside bytes (corpora live in testdata/fuzz).
fuzz:
	@echo "== fuzz $$(date +%T)"
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

## bench: engine speed against native llama.cpp (needs `make llama-native` once).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./internal/enginebench

## bench-vs-llama: the speed table against native llama.cpp (f32, Q8_0, Q4_K_M, Q6_K: prefill
## 512/2048, decode at 1 and 4 streams, bandwidth as a share of memcpy), both engines
## alternating in one run. Builds native llama.cpp first when its binaries are missing.
NATIVE_BIN := .cache/llama.cpp-build/bin
bench-vs-llama:
	@if [ ! -x $(NATIVE_BIN)/llama-bench ] || [ ! -x $(NATIVE_BIN)/llama-batched-bench ]; then LLAMA_NATIVE_TARGETS="llama-bench llama-batched-bench" $(MAKE) llama-native; fi
	$(GO) test -run '^$$' -bench '^BenchmarkVsLlamaCpp$$' -benchtime 1x -timeout 60m ./internal/enginebench

## bench-vs-llama-avx2: the same table as an AVX2-only x86-64 (Haswell to Zen 3) runs it, on
## this machine: native llama.cpp built for AVX2, FMA and F16C without AVX-512 or AMX
## (.cache/llama.cpp-build-avx2, built first when missing) against Stockpot with AVX-512 off
## (GODEBUG), so both engines take their AVX2 kernels. The header names what each ran.
NATIVE_BIN_AVX2 := .cache/llama.cpp-build-avx2/bin
NO_AVX512 := cpu.avx512f=off,cpu.avx512bw=off,cpu.avx512vl=off,cpu.avx512dq=off,cpu.avx512cd=off
bench-vs-llama-avx2:
	@if [ ! -x $(NATIVE_BIN_AVX2)/llama-bench ] || [ ! -x $(NATIVE_BIN_AVX2)/llama-batched-bench ]; then LLAMA_NATIVE_ISA=avx2 LLAMA_NATIVE_TARGETS="llama-bench llama-batched-bench" $(MAKE) llama-native; fi
	STOCKPOT_LLAMA_NATIVE_BIN=$(abspath $(NATIVE_BIN_AVX2)) GODEBUG=$(NO_AVX512) $(GO) test -run '^$$' -bench '^BenchmarkVsLlamaCpp$$' -benchtime 1x -timeout 60m ./internal/enginebench

## bench-hybrid-vs-llama: cold prefill of small-kimi-k3, small-kimi-linear and small-qwen35
## through serve (K/V f16) against llama-bench -p N on the same files, at 4K, 16K and 64K tokens
## (STOCKPOT_HYBRID_LENGTHS), alternating. About 15 minutes on 2 cores.
bench-hybrid-vs-llama:
	@if [ ! -x $(NATIVE_BIN)/llama-bench ]; then LLAMA_NATIVE_TARGETS="llama-bench" $(MAKE) llama-native; fi
	$(GO) test -run '^$$' -bench '^BenchmarkHybridVsLlamaCpp$$' -benchtime 1x -timeout 90m ./internal/enginebench

## bench-pd: prefill/decode disaggregation on this machine's first two cores (README,
## "Prefill/decode disaggregation"): a mixed load against a P/D pair, one both replica and two
## behind the router, then the handoff's share of TTFT at 2K, 32K and 128K (small-kimi-k3) and
## the store path through redis-server (which `make sysdeps` installs). About 13 minutes.
## PD_FLAGS adds `stockpot bench pd` flags; the report (pd.json, pd.html, pd.png) lands in bin/bench-pd/.
PD_FLAGS ?=
bench-pd: build
	bin/stockpot bench pd --out bin/bench-pd $(PD_FLAGS)

## bench-llama-prefix: two native llama-server replicas (built by `make llama-native` when
## missing) behind `route --policy prefix`; each turn's own llama-server timings (cache_n,
## prompt_n) show the prefix hit. Outside CI; the report lands in bin/bench-llama-prefix/.
.PHONY: bench-llama-prefix
bench-llama-prefix:
	scripts/bench-llama-prefix.sh
.PHONY: deps
# ---- deps: llama.cpp reference (owner: internal/llamaref; see tools/llamaref/README.md) ----
# `make deps` installs node-llama-cpp (pinned by tools/llamaref/package-lock.json) into
# .cache/llamaref. Idempotent. The native llama.cpp build for speed ratios is separate
# and slow: scripts/build-llama-native.sh (or `make llama-native`).
.PHONY: llama-native
deps:
	@echo "== deps $$(date +%T)"
	scripts/install-llamaref.sh
	scripts/install-agentclients.sh
	scripts/install-jinjaref.sh

llama-native: deps
	nice scripts/build-llama-native.sh
# ---- end deps ----
