package preflight

import (
	"fmt"
	"strings"
	"time"
)

// Status is a check's verdict.
type Status int

const (
	Pass Status = iota
	Warn        // a risk or a cost: fails the run only when strict
	Fail        // broken: the run fails
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "pass"
	case Warn:
		return "warn"
	}
	return "fail"
}

// Line is one check's verdict on one replica (Where: its host:port; the identity check's is
// the router or the single target).
type Line struct {
	Status Status
	Check  string
	Where  string
	Reason string
}

// String is the line as `stockpot check` prints it: status, check, where, reason, the first
// three in columns.
func (l Line) String() string {
	return fmt.Sprintf("%-4s  %-15s %-21s %s", l.Status, l.Check, l.Where, l.Reason)
}

// Input is everything Evaluate judges.
type Input struct {
	Target   string // the --target as named in the identity line
	Replicas []Replica
}

// Replica is what one serve reported (cmd/stockpot/check.go gathers it).
type Replica struct {
	Name string // host:port
	// Err, when set, is why the replica could not be probed; the replica gets one fail line.
	Err string

	// From POST /v1/cache/probe (server.CacheProbe).
	Identity        string // cache identity digest, hex
	Fingerprint     string // the model file's
	BlockSize       int
	BlockBytes      int64
	PoolBytes       int64 // the working pool
	PrefixCache     bool
	Prefetch        string // wait, timeout or best-effort
	PrefetchMaxWait time.Duration
	PrefillRate     float64 // the cost model's tokens/s (position 0)
	AttendCost      float64
	Tiers           []Tier // lower tiers, fastest first

	// Hits is stockpot_prefix_cache_hits_total by tier (tokens reused since start).
	Hits map[string]float64
	// Recent is what the recent requests say (nil: not read, and RecentErr says why).
	Recent    *Recent
	RecentErr string
}

// Tier is one lower tier's probe.
type Tier struct {
	Name          string // host, disk or remote
	CapacityBytes int64  // 0: no budget of its own (Redis)
	Evictions     uint64
	PinnedItems   int64
	Records       int
	ReadBytes     int64
	ReadTime      time.Duration
	Err           string // the round trip failed
	Redis         []RedisNode
}

// RedisNode is one Redis server's eviction settings.
type RedisNode struct {
	Addr      string
	Policy    string
	MaxMemory int64
	Err       string
}

// Recent is the recent requests (GET /v1/requests/recent) as lint replays them.
type Recent struct {
	Requests      int
	TypicalTokens int     // the median prompt
	ReusedBlocks  int     // distinct blocks two or more prompts share (ReusedBlocks)
	HitRate       float64 // lint's replay
	AllFixed      float64 // the replay with every found cause fixed
	// Unstable counts the requests that leave the cached prefix at a cause lint can fix
	// (timestamp, uuid, reordered, whitespace, salt), by cause.
	Unstable map[string]int
}

// TypicalPromptTokens is the prompt the restore checks price when there are no recent
// requests: 1024 tokens, a system prompt with tool schemas, about what the seeds' agent
// workloads repeat on every turn.
const TypicalPromptTokens = 1024

// Evaluate runs every check on every replica, then the identity check across them.
func Evaluate(in Input) []Line {
	var out []Line
	for _, r := range in.Replicas {
		if r.Err != "" {
			out = append(out, Line{Fail, "reach", r.Name, r.Err})
			continue
		}
		out = append(out, prefixCache(r))
		out = append(out, tierLines(r)...)
		out = append(out, hostSize(r))
		out = append(out, readRates(r)...)
		out = append(out, redisPolicy(r)...)
		if l, ok := prefetch(r); ok {
			out = append(out, l)
		}
		out = append(out, unstable(r))
	}
	if l, ok := sameIdentity(in); ok {
		out = append(out, l)
	}
	return out
}

// Failed says whether lines fail the run: any fail, or with strict any warn too.
func Failed(lines []Line, strict bool) bool {
	for _, l := range lines {
		if l.Status == Fail || (strict && l.Status == Warn) {
			return true
		}
	}
	return false
}

// Summary is the last line: the count of each verdict.
func Summary(lines []Line) string {
	var n [3]int
	for _, l := range lines {
		n[l.Status]++
	}
	return fmt.Sprintf("check: %d pass, %d warn, %d fail", n[Pass], n[Warn], n[Fail])
}

// Write renders lines and the summary, one a line.
func Write(lines []Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	b.WriteString(Summary(lines))
	b.WriteByte('\n')
	return b.String()
}
