#!/usr/bin/env bash
# Two native llama-server replicas (make llama-native) behind `stockpot route --policy prefix`:
# sessions whose turns share a long prefix, each turn sent through the router, and each answer's
# own llama-server `timings` (cache_n: prompt tokens reused from the slot's cache, prompt_n:
# tokens computed) proving where the prefix hit. Outside CI: the native build takes too long
# there. Env: SESSIONS [8], TURNS [4], PREFIX [1024 tokens], PRESET [default: stockpot model's
# synthetic preset written as GGUF], OUT [bin/bench-llama-prefix].
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${NATIVE_BIN:-.cache/llama.cpp-build/bin}
OUT=${OUT:-bin/bench-llama-prefix}
SESSIONS=${SESSIONS:-8} TURNS=${TURNS:-4} PREFIX=${PREFIX:-1024} PRESET=${PRESET:-default}
mkdir -p "$OUT"
if [ ! -x "$BIN/llama-server" ]; then LLAMA_NATIVE_TARGETS=llama-server make llama-native; fi
go build -o bin/stockpot ./cmd/stockpot
[ -f "$OUT/model.gguf" ] || bin/stockpot model synth --preset "$PRESET" --out "$OUT/model.gguf"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for port in 18081 18082; do
	"$BIN/llama-server" -m "$OUT/model.gguf" --host 127.0.0.1 --port $port -c $((PREFIX * 2 + 512)) -np 1 -t 1 >"$OUT/llama-$port.log" 2>&1 &
	pids+=($!)
done
bin/stockpot route --policy prefix --addr 127.0.0.1:18090 --backend http://127.0.0.1:18081 --backend http://127.0.0.1:18082 >"$OUT/route.log" 2>&1 &
pids+=($!)
for url in http://127.0.0.1:18081 http://127.0.0.1:18082 http://127.0.0.1:18090; do
	for _ in $(seq 600); do curl -fsS "$url/health" >/dev/null 2>&1 && break; sleep 0.2; done
done
/usr/bin/python3 - "$SESSIONS" "$TURNS" "$PREFIX" <<'PY' | tee "$OUT/report.txt"
import json, random, sys, urllib.error, urllib.request
sessions, turns, prefix = map(int, sys.argv[1:])
first = {"cache": 0, "prompt": 0}
later = {"cache": 0, "prompt": 0}
failed = 0
for s in range(sessions):
    rng = random.Random(s)
    p = [rng.randrange(10, 500) for _ in range(prefix)]
    for t in range(turns):
        prompt = p + [rng.randrange(10, 500) for _ in range(32)]
        p = prompt
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "cache_prompt": True}).encode()
        req = urllib.request.Request("http://127.0.0.1:18090/v1/completions", body, {"Content-Type": "application/json"})
        try:
            out = json.load(urllib.request.urlopen(req, timeout=600))
        except urllib.error.HTTPError as e:
            # llama-server's output parser refuses a random-weights model's token that is not
            # whole UTF-8 ("does not match the expected Content-only format") after it computed
            # the prompt: the turn is counted as failed, its slot cache kept for the next turn.
            failed += 1
            print(f"session {s} turn {t}: HTTP {e.code} {e.read()[:120]!r}")
            continue
        tm = out.get("timings") or {}
        cache_n, prompt_n = tm.get("cache_n"), tm.get("prompt_n")
        if cache_n is None:
            sys.exit("llama-server answered without timings.cache_n: " + json.dumps(out)[:300])
        acc = first if t == 0 else later
        acc["cache"] += cache_n
        acc["prompt"] += prompt_n
        print(f"session {s} turn {t}: cache_n {cache_n:5d} prompt_n {prompt_n:5d} prompt_ms {tm.get('prompt_ms', 0):8.1f}")
print(f"{failed} turns answered with an error (left out of the sums)")
for name, acc in (("first turns", first), ("later turns", later)):
    tot = acc["cache"] + acc["prompt"]
    print(f"{name}: {acc['cache']} of {tot} prompt tokens from the replica's cache ({100 * acc['cache'] / max(1, tot):.1f}%)")
PY
