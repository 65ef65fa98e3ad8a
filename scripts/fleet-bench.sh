#!/usr/bin/env bash
# fleet-bench.sh: the Mooncake claim, measured. Several replicas behind `stockpot route`, an
# agent workload of many sessions × turns, four cases:
#   a) random routing, no shared tier      b) random routing, write-through to one Redis
#   c) kv-aware routing, no shared tier    d) kv-aware routing, write-through to one Redis
# Each case starts fresh processes (and a fresh Redis), runs `stockpot bench` through the router
# with --metrics-url on every replica (the hit rate comes from the replicas' counters), and the
# script prints one markdown table: server hit rate, client cached ratio, TTFT p50/p90/p95,
# prompt tokens by source. Reports land in $OUT/<case>/report.{json,html}.
#
#   go build -o stockpot ./cmd/stockpot && scripts/fleet-bench.sh
#
# Knobs (environment): SP (binary, ./stockpot), MODEL (synthetic:tiny-llama-spm), REPLICAS (3),
# SESSIONS (48), TURNS (10), CONCURRENCY (8), KV (24MiB working pool per replica: small, so
# sessions evict each other as a loaded fleet does), THREADS (1 per replica), MAX_TOKENS (8),
# PORT (18180: replicas PORT+1.., router PORT+90, Redis PORT+99), OUT (fleet-bench-out),
# CASES ("a b c d"). Needs redis-server and python3 (to read report.json).
set -euo pipefail
SP=${SP:-./stockpot}
MODEL=${MODEL:-synthetic:tiny-llama-spm}
REPLICAS=${REPLICAS:-3}
SESSIONS=${SESSIONS:-48}
TURNS=${TURNS:-10}
CONCURRENCY=${CONCURRENCY:-8}
KV=${KV:-24MiB}
THREADS=${THREADS:-1}
MAX_TOKENS=${MAX_TOKENS:-8}
PORT=${PORT:-18180}
OUT=${OUT:-fleet-bench-out}
CASES=${CASES:-a b c d}
mkdir -p "$OUT"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap cleanup EXIT

wait_health() { # url
	for _ in $(seq 200); do
		curl -sf "$1/health" >/dev/null && return 0
		sleep 0.1
	done
	echo "not healthy: $1" >&2
	return 1
}

run_case() { # name policy shared(0|1)
	local name=$1 policy=$2 shared=$3 extra=() backends=() metrics=()
	if [ "$shared" = 1 ]; then
		redis-server --port $((PORT + 99)) --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" >"$OUT/$name-redis.log" 2>&1 &
		pids+=($!)
		for _ in $(seq 100); do redis-cli -p $((PORT + 99)) ping >/dev/null 2>&1 && break; sleep 0.1; done
		extra=(--remote-cache "redis://127.0.0.1:$((PORT + 99))/0" --remote-write through)
	fi
	for i in $(seq "$REPLICAS"); do
		"$SP" serve --model "$MODEL" --addr "127.0.0.1:$((PORT + i))" --threads "$THREADS" --kv-memory "$KV" "${extra[@]}" \
			>"$OUT/$name-serve$i.log" 2>&1 &
		pids+=($!)
		backends+=(--backend "http://127.0.0.1:$((PORT + i))")
		metrics+=(--metrics-url "http://127.0.0.1:$((PORT + i))")
	done
	for i in $(seq "$REPLICAS"); do wait_health "http://127.0.0.1:$((PORT + i))"; done
	"$SP" route --policy "$policy" --addr "127.0.0.1:$((PORT + 90))" "${backends[@]}" >"$OUT/$name-route.log" 2>&1 &
	pids+=($!)
	wait_health "http://127.0.0.1:$((PORT + 90))"
	if [ "$policy" = kv-aware ]; then # every replica's snapshot loaded
		for _ in $(seq 100); do
			[ "$(curl -s "http://127.0.0.1:$((PORT + 90))/metrics" | grep -c '^stockpot_router_resyncs_total{.*} [1-9]')" = "$REPLICAS" ] && break
			sleep 0.1
		done
	fi
	"$SP" bench --target "http://127.0.0.1:$((PORT + 90))" "${metrics[@]}" --workload agent --sessions "$SESSIONS" \
		--turns "$TURNS" --concurrency "$CONCURRENCY" --max-tokens "$MAX_TOKENS" --quiet --out "$OUT/$name" >"$OUT/$name.txt"
	cleanup
}

declare -A POLICY=([a]=random [b]=random [c]=kv-aware [d]=kv-aware)
declare -A SHARED=([a]=0 [b]=1 [c]=0 [d]=1)
for c in $CASES; do
	echo "case $c: ${POLICY[$c]}, shared tier ${SHARED[$c]}" >&2
	run_case "$c" "${POLICY[$c]}" "${SHARED[$c]}"
done

echo "$REPLICAS replicas ($MODEL, --kv-memory $KV, --threads $THREADS), $SESSIONS sessions × $TURNS turns, concurrency $CONCURRENCY"
echo
echo "| case | routing | shared tier | requests / errors | server hit rate | client cached | TTFT p50 / p90 / p95 ms | prompt tokens: device / remote / computed |"
echo "|---|---|---|---|---|---|---|---|"
for c in $CASES; do
	python3 - "$OUT/$c/report.json" "$c" "${POLICY[$c]}" "${SHARED[$c]}" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"
t = r["ttft_ms"] or {}
tiers = r.get("per_tier") or {}
print(f"| {sys.argv[2]} | {sys.argv[3]} | {'write-through' if sys.argv[4] == '1' else 'none'} | {r['requests']} / {r['errors']} "
      f"| {pct(r['server_hit_rate'])} | {pct(r['client_cached_ratio'])} "
      f"| {t.get('p50', 0):.1f} / {t.get('p90', 0):.1f} / {t.get('p95', 0):.1f} "
      f"| {tiers.get('device', 0):.0f} / {tiers.get('remote', 0):.0f} / {tiers.get('computed', 0):.0f} |")
EOF
done
