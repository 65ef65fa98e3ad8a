package preflight

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/offload"
)

func prefixCache(r Replica) Line {
	if !r.PrefixCache {
		return Line{Fail, "prefix-cache", r.Name, "off (--prefix-cache=false): every prompt is computed from its first token, and nothing below reuses anything"}
	}
	return Line{Pass, "prefix-cache", r.Name, fmt.Sprintf("on, %d-token blocks of %s", r.BlockSize, size(r.BlockBytes))}
}

func tierLines(r Replica) []Line {
	if len(r.Tiers) == 0 {
		return []Line{{Pass, "tiers", r.Name, "none below the working pool (no --host-cache, --disk-cache or --remote-cache): evicted prefixes are recomputed"}}
	}
	var out []Line
	for _, t := range r.Tiers {
		name := "tier-" + t.Name
		if t.Err != "" {
			out = append(out, Line{Fail, name, r.Name, "round trip failed: " + t.Err})
			continue
		}
		out = append(out, Line{Pass, name, r.Name, fmt.Sprintf("wrote, read back and matched %d probe records (%s)", t.Records, size(t.ReadBytes))})
	}
	return out
}

func findTier(r Replica, name string) (Tier, bool) {
	for _, t := range r.Tiers {
		if t.Name == name {
			return t, true
		}
	}
	return Tier{}, false
}

// hostSize compares the host tier (or, without one, the working pool) with the reusable
// working set of the recent requests, and reads the counters for a host tier that evicts
// while hits come from below it.
func hostSize(r Replica) Line {
	ws, known := int64(-1), r.Recent != nil && r.Recent.Requests > 0
	set := "no recent requests to size the reusable working set from"
	if known {
		ws = int64(r.Recent.ReusedBlocks) * r.BlockBytes
		set = fmt.Sprintf("reusable working set %s (%d blocks shared by the %d recent requests)", size(ws), r.Recent.ReusedBlocks, r.Recent.Requests)
	}
	host, ok := findTier(r, "host")
	if !ok {
		if ws > r.PoolBytes {
			return Line{Warn, "host-size", r.Name, fmt.Sprintf("no host tier, and the %s is over the working pool (%s): reused prefixes are evicted and recomputed (--host-cache)", set, size(r.PoolBytes))}
		}
		return Line{Pass, "host-size", r.Name, fmt.Sprintf("no host tier; working pool %s; %s", size(r.PoolBytes), set)}
	}
	if ws > host.CapacityBytes {
		return Line{Warn, "host-size", r.Name, fmt.Sprintf("host tier %s is under the %s", size(host.CapacityBytes), set)}
	}
	below := r.Hits["disk"] + r.Hits["remote"]
	if host.Evictions > 0 && below > 0 {
		return Line{Warn, "host-size", r.Name, fmt.Sprintf("host tier %s evicted %d blocks while %.0f tokens were reused from disk or Redis: it is under the working set; %s",
			size(host.CapacityBytes), host.Evictions, below, set)}
	}
	return Line{Pass, "host-size", r.Name, fmt.Sprintf("host tier %s, %d evictions; %s", size(host.CapacityBytes), host.Evictions, set)}
}

// typical is the prompt the restore checks price.
func typical(r Replica) int {
	if r.Recent != nil && r.Recent.TypicalTokens > 0 {
		return r.Recent.TypicalTokens
	}
	return TypicalPromptTokens
}

// restore is what restoring a typical prompt from t costs and what the server's cost model
// decides: its read time at the measured rate, its recompute time at the prefill rate, and
// how many of its blocks Plan restores.
type restore struct {
	tokens, blocks, planned int
	rate                    float64 // bytes/s measured
	read, recompute         time.Duration
}

func priceRestore(r Replica, t Tier) (restore, bool) {
	kt, err := kvtier.Parse(t.Name)
	if err != nil || t.ReadBytes <= 0 || r.BlockSize <= 0 {
		return restore{}, false
	}
	p := restore{tokens: typical(r)}
	p.blocks = max(1, p.tokens/r.BlockSize)
	p.rate = float64(t.ReadBytes) / max(t.ReadTime.Seconds(), 1e-9)
	cost := offload.DefaultCostConfig()
	cost.ReadBandwidth = map[kvtier.Tier]float64{kt: p.rate}
	cost.PrefillTokensPerSecond, cost.AttendCost = r.PrefillRate, r.AttendCost
	m, err := offload.NewCostModel(cost)
	if err != nil {
		return restore{}, false
	}
	spans := make([]offload.Span, p.blocks)
	for i := range spans {
		spans[i] = offload.Span{Tier: kt, Bytes: r.BlockBytes, Tokens: r.BlockSize, Pos: i * r.BlockSize}
	}
	p.planned, _ = m.Plan(spans)
	bytes := float64(p.blocks) * float64(r.BlockBytes)
	p.read = cost.Overhead[kt] + seconds(bytes/p.rate)
	k := float64(p.blocks * r.BlockSize)
	p.recompute = seconds((k + r.AttendCost*k*(k-1)/2) / m.PrefillRate())
	return p, true
}

func readRates(r Replica) []Line {
	var out []Line
	for _, t := range r.Tiers {
		p, ok := priceRestore(r, t)
		if !ok {
			continue
		}
		name := "read-" + t.Name
		facts := fmt.Sprintf("read %s in %s: %.1f MB/s; a %d-token prompt restores in %s, recomputes in %s (prefill %.0f tok/s)",
			size(t.ReadBytes), dur(t.ReadTime), p.rate/1e6, p.blocks*r.BlockSize, dur(p.read), dur(p.recompute), r.PrefillRate)
		switch {
		case p.planned == 0:
			out = append(out, Line{Warn, name, r.Name, facts + ": slower than recomputing, the cost model never restores from it"})
		case p.planned < p.blocks:
			out = append(out, Line{Warn, name, r.Name, fmt.Sprintf("%s: the cost model restores only the first %d of its %d blocks", facts, p.planned, p.blocks)})
		default:
			out = append(out, Line{Pass, name, r.Name, facts})
		}
	}
	return out
}

func redisPolicy(r Replica) []Line {
	t, ok := findTier(r, "remote")
	if !ok {
		return nil
	}
	var out []Line
	for _, n := range t.Redis {
		st, why := judgeRedis(n, t.PinnedItems)
		addr := n.Addr
		if addr == "" {
			addr = "redis"
		}
		out = append(out, Line{st, "redis-policy", r.Name, addr + ": " + why})
	}
	return out
}

// judgeRedis is the eviction policy rule (see the package doc).
func judgeRedis(n RedisNode, pins int64) (Status, string) {
	const want = "set maxmemory and maxmemory-policy volatile-lru (or volatile-ttl to evict pins last)"
	mm := "maxmemory " + size(n.MaxMemory)
	switch {
	case n.Err != "":
		return Warn, "CONFIG GET maxmemory* failed (" + n.Err + "); check the policy by hand: " + want
	case n.Policy == "noeviction" && n.MaxMemory > 0:
		return Fail, "noeviction with " + mm + ": a full Redis refuses every new block (OOM) and the tier stops taking writes; " + want
	case n.MaxMemory == 0:
		return Warn, n.Policy + " without maxmemory: the policy never applies and Redis grows until the blocks' TTLs expire them; " + want
	case strings.HasPrefix(n.Policy, "volatile-"):
		return Pass, n.Policy + ", " + mm + ": every block key carries a TTL, so any can be evicted; pins carry the longest"
	case strings.HasPrefix(n.Policy, "allkeys-") && pins > 0:
		return Warn, fmt.Sprintf("%s, %s ignores TTLs: %d pinned blocks can be evicted; pinned prefixes need volatile-*", n.Policy, mm, pins)
	case strings.HasPrefix(n.Policy, "allkeys-"):
		return Pass, n.Policy + ", " + mm + ": evicts any block (no pins in use; pinned prefixes would need volatile-*)"
	}
	return Warn, "unknown policy " + n.Policy + " with " + mm + "; " + want
}

// prefetch compares --prefetch timeout's max wait with the slowest tier's restore of a
// typical prompt (cost, the default, waits by the same cost model the read- lines price, so
// it passes with the measurement); false when there are no tiers to prefetch from.
func prefetch(r Replica) (Line, bool) {
	if len(r.Tiers) == 0 {
		return Line{}, false
	}
	var slow restore
	slowName := ""
	for _, t := range r.Tiers {
		if p, ok := priceRestore(r, t); ok && p.read > slow.read {
			slow, slowName = p, t.Name
		}
	}
	measured := "no read measured"
	if slowName != "" {
		measured = fmt.Sprintf("the slowest tier (%s) restores a %d-token prompt in %s", slowName, slow.blocks*r.BlockSize, dur(slow.read))
	}
	switch {
	case r.Prefetch == "timeout" && slowName != "" && r.PrefetchMaxWait < slow.read:
		return Line{Warn, "prefetch", r.Name, fmt.Sprintf("timeout waits at most %s but %s: queued requests compute what has not arrived (raise --prefetch-timeout past %s, or --prefetch wait)",
			dur(r.PrefetchMaxWait), measured, dur(slow.read))}, true
	case r.Prefetch == "timeout":
		return Line{Pass, "prefetch", r.Name, fmt.Sprintf("timeout, max wait %s; %s", dur(r.PrefetchMaxWait), measured)}, true
	}
	how := map[string]string{"wait": "wait (queued requests wait for their restores)", "best-effort": "best-effort (queued requests never wait for a restore)",
		"cost": "cost (queued requests wait while the cost model finds the rest of a restore cheaper than recomputing it; the read- lines say which tiers beat recompute)"}[r.Prefetch]
	return Line{Pass, "prefetch", r.Name, cmp.Or(how, r.Prefetch) + "; " + measured}, true
}

func unstable(r Replica) Line {
	switch {
	case r.Recent == nil:
		return Line{Warn, "unstable-prefix", r.Name, "recent requests not read: " + r.RecentErr}
	case r.Recent.Requests == 0:
		return Line{Pass, "unstable-prefix", r.Name, "no recent requests to replay"}
	}
	rc := r.Recent
	causes := make([]string, 0, len(rc.Unstable))
	n := 0
	for c, k := range rc.Unstable {
		if k > 0 {
			causes = append(causes, fmt.Sprintf("%s=%d", c, k))
			n += k
		}
	}
	sort.Strings(causes)
	if n == 0 {
		return Line{Pass, "unstable-prefix", r.Name, fmt.Sprintf("%d recent requests replay at a %.1f%% hit rate with no unstable prefix", rc.Requests, 100*rc.HitRate)}
	}
	return Line{Warn, "unstable-prefix", r.Name, fmt.Sprintf("%d of %d recent requests leave the cached prefix at an unstable spot (%s): hit rate %.1f%%, %.1f%% fixed (stockpot lint --target lists them)",
		n, rc.Requests, strings.Join(causes, " "), 100*rc.HitRate, 100*rc.AllFixed)}
}

// sameIdentity: one identity across the reachable replicas; false when none was reached.
func sameIdentity(in Input) (Line, bool) {
	groups := map[string][]string{}
	var ids []string
	for _, r := range in.Replicas {
		if r.Err != "" {
			continue
		}
		key := fmt.Sprintf("%s (block size %d, model %s)", short(r.Identity), r.BlockSize, short(r.Fingerprint))
		if _, ok := groups[key]; !ok {
			ids = append(ids, key)
		}
		groups[key] = append(groups[key], r.Name)
	}
	switch len(ids) {
	case 0:
		return Line{}, false
	case 1:
		n := len(groups[ids[0]])
		if n == 1 {
			return Line{Pass, "identity", in.Target, "cache identity " + ids[0]}, true
		}
		return Line{Pass, "identity", in.Target, fmt.Sprintf("all %d replicas share cache identity %s", n, ids[0])}, true
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strings.Join(groups[id], ", ") + ": " + id
	}
	return Line{Fail, "identity", in.Target, fmt.Sprintf("replicas differ in cache identity, so none reuses another's blocks: %s", strings.Join(parts, "; "))}, true
}

// short is the first 12 hex digits of an identity or fingerprint.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "?"
	}
	return h
}

// size is n bytes, approximately, in the largest binary unit under it.
func size(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if math.Abs(f) < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1024
	}
	return ""
}

// dur is d rounded for reading: whole µs under 1 ms, ms with one decimal under 10 s.
func dur(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1e3)
}

func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}
