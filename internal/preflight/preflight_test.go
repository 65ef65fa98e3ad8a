package preflight

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/bytesize"
)

// scenario is one testdata script's replicas, built up command by command.
type scenario struct {
	in    Input
	index map[string]int
}

func (s *scenario) replica(t *testing.T, name string) *Replica {
	i, ok := s.index[name]
	if !ok {
		t.Fatalf("no replica %q (declare it with replica name=%s)", name, name)
	}
	return &s.in.Replicas[i]
}

// args is a command's arguments as key -> value (several values joined by ",").
func args(d *datadriven.TestData) map[string]string {
	m := map[string]string{}
	for _, a := range d.CmdArgs {
		m[a.Key] = strings.Join(a.Vals, ",")
	}
	return m
}

func or(m map[string]string, k, def string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return def
}

func mustSize(t *testing.T, v string) int64 {
	n, err := bytesize.Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustDur(t *testing.T, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustFloat(t *testing.T, v string) float64 {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustInt(t *testing.T, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// addReplica: replica name=N [identity= fingerprint= block-size= block-bytes= pool=
// prefix-cache=on|off prefetch= max-wait= prefill= attend=]; the defaults are a healthy
// replica of the tiny test model.
func (s *scenario) addReplica(t *testing.T, m map[string]string) {
	r := Replica{Name: m["name"], Identity: or(m, "identity", "1d0e2b3c4a5f60718293a4b5"), Fingerprint: or(m, "fingerprint", "f00dfeedbeef0001"),
		BlockSize: mustInt(t, or(m, "block-size", "16")), BlockBytes: mustSize(t, or(m, "block-bytes", "48KiB")),
		PoolBytes: mustSize(t, or(m, "pool", "16MiB")), PrefixCache: or(m, "prefix-cache", "on") == "on",
		Prefetch: or(m, "prefetch", "wait"), PrefetchMaxWait: mustDur(t, or(m, "max-wait", "500ms")),
		PrefillRate: mustFloat(t, or(m, "prefill", "2000")), AttendCost: mustFloat(t, or(m, "attend", "0")), Hits: map[string]float64{},
		Recent: &Recent{}}
	s.index[r.Name] = len(s.in.Replicas)
	s.in.Replicas = append(s.in.Replicas, r)
}

// addTier: tier replica=N name=host|disk|remote [capacity= read= in= evictions= pins=
// records=]; the input, when not empty, is the round trip's error.
func (s *scenario) addTier(t *testing.T, m map[string]string, input string) {
	r := s.replica(t, m["replica"])
	tr := Tier{Name: m["name"], CapacityBytes: mustSize(t, or(m, "capacity", "0")), ReadBytes: mustSize(t, or(m, "read", "0")),
		ReadTime: mustDur(t, or(m, "in", "0s")), Evictions: uint64(mustInt(t, or(m, "evictions", "0"))),
		PinnedItems: int64(mustInt(t, or(m, "pins", "0"))), Records: mustInt(t, or(m, "records", "64")), Err: input}
	r.Tiers = append(r.Tiers, tr)
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	m := args(d)
	switch d.Cmd {
	case "reset":
		s.in, s.index = Input{}, map[string]int{}
	case "replica":
		s.addReplica(t, m)
	case "unreachable":
		s.index[m["replica"]] = len(s.in.Replicas)
		s.in.Replicas = append(s.in.Replicas, Replica{Name: m["replica"], Err: d.Input})
	case "tier":
		s.addTier(t, m, d.Input)
	case "redis":
		r := s.replica(t, m["replica"])
		tr := &r.Tiers[len(r.Tiers)-1]
		tr.Redis = append(tr.Redis, RedisNode{Addr: m["addr"], Policy: m["policy"], MaxMemory: mustSize(t, or(m, "maxmemory", "0")), Err: d.Input})
	case "hits":
		r := s.replica(t, m["replica"])
		for k, v := range m {
			if k != "replica" {
				r.Hits[k] = mustFloat(t, v)
			}
		}
	case "recent":
		s.setRecent(t, m, d.Input)
	case "check":
		s.in.Target = or(m, "target", "route:8090")
		lines := Evaluate(s.in)
		return Write(lines) + fmt.Sprintf("exit %v\n", map[bool]int{false: 0, true: 1}[Failed(lines, d.HasArg("strict"))])
	case "reused":
		return reusedCmd(t, m, d.Input)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return ""
}

// setRecent: recent replica=N [requests= typical= reused= hit-rate= all-fixed=
// unstable=(cause:n,...)]; with an input, the recent requests could not be read (the input
// says why).
func (s *scenario) setRecent(t *testing.T, m map[string]string, input string) {
	r := s.replica(t, m["replica"])
	if input != "" {
		r.Recent, r.RecentErr = nil, input
		return
	}
	rc := &Recent{Requests: mustInt(t, or(m, "requests", "0")), TypicalTokens: mustInt(t, or(m, "typical", "0")),
		ReusedBlocks: mustInt(t, or(m, "reused", "0")), HitRate: mustFloat(t, or(m, "hit-rate", "0")),
		AllFixed: mustFloat(t, or(m, "all-fixed", "0")), Unstable: map[string]int{}}
	if v := m["unstable"]; v != "" {
		for _, kv := range strings.Split(v, ",") {
			c, n, _ := strings.Cut(kv, ":")
			rc.Unstable[c] = mustInt(t, n)
		}
	}
	r.Recent = rc
}

// reusedCmd: reused block-size=B, input one prompt a line ("salt: 1 2 3 ..."): the working
// set in blocks and the median prompt.
func reusedCmd(t *testing.T, m map[string]string, input string) string {
	ps := parsePrompts(t, input)
	bs := mustInt(t, m["block-size"])
	return fmt.Sprintf("reused %d blocks (brute force %d), median %d tokens\n", ReusedBlocks(ps, bs), bruteReused(ps, bs), MedianTokens(ps))
}

func parsePrompts(t *testing.T, input string) []Prompt {
	var ps []Prompt
	for _, line := range strings.Split(input, "\n") {
		salt, toks, _ := strings.Cut(line, ":")
		p := Prompt{Salt: strings.TrimSpace(salt)}
		for _, f := range strings.Fields(toks) {
			p.Tokens = append(p.Tokens, int32(mustInt(t, f)))
		}
		ps = append(ps, p)
	}
	return ps
}

// bruteReused is ReusedBlocks' oracle: a block is its salt and whole token prefix as a string.
func bruteReused(ps []Prompt, bs int) int {
	count := map[string]int{}
	for _, p := range ps {
		for end := bs; end <= len(p.Tokens); end += bs {
			count[fmt.Sprint(p.Salt, "|", p.Tokens[:end])]++
		}
	}
	n := 0
	for _, c := range count {
		if c >= 2 {
			n++
		}
	}
	return n
}

func TestPreflight(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &scenario{index: map[string]int{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.run(t, d)
		})
	})
}

// TestReusedBlocksOracle: random prompts over a tiny vocabulary (so they share prefixes), two
// salts, odd lengths: ReusedBlocks agrees with the brute force.
func TestReusedBlocksOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var ps []Prompt
		for range 1 + rng.IntN(8) {
			p := Prompt{Salt: []string{"", "t1"}[rng.IntN(2)]}
			for range rng.IntN(40) {
				p.Tokens = append(p.Tokens, int32(rng.IntN(2)))
			}
			ps = append(ps, p)
		}
		bs := 1 + rng.IntN(5)
		if have, want := ReusedBlocks(ps, bs), bruteReused(ps, bs); have != want {
			t.Fatalf("trial %d, block size %d: have %d reused blocks, want %d", trial, bs, have, want)
		}
	}
}
