.PHONY: deps

# ---- deps: llama.cpp reference (owner: internal/llamaref; see tools/llamaref/README.md) ----
# `make deps` installs node-llama-cpp (pinned by tools/llamaref/package-lock.json) into
# .cache/llamaref. Idempotent. The native llama.cpp build for speed ratios is separate
# and slow: scripts/build-llama-native.sh (or `make llama-native`).
.PHONY: llama-native
deps:
	scripts/install-llamaref.sh

llama-native: deps
	nice scripts/build-llama-native.sh
# ---- end deps ----
