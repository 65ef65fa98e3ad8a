package router

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// policyScenario drives a Policy from testdata/policy/*.txt scripts. Affinity keys are hashed
// with a fixed hash, but a script still never names a session's backend directly: it asks for
// a session whose rendezvous order over the current backends is a given one (the driver tries
// IDs until one fits), and everything after that is deterministic.
//
// Commands:
//
//	policy name=P [bound=C] [threshold=N] [penalty=X]   NewPolicy
//	add b=(b1,b2,…) [reuse=N]        backends join (healthy, in-sync empty index); reuse: the
//	                                 replicas' published reuse unit in blocks (0: none said)
//	remove b=(b1,…)                  backends leave the candidate list
//	load b1=N b2=M …                 set in-flight requests
//	session name=S order=(b2,b1,…)   find a session ID whose rendezvous order starts so
//	pick session=S [busy]            Pick; busy: the chosen backend's load goes up by one
//	index b=B tokens=(…) [tier=device|host|disk|remote] [salt=S]
//	                                 B holds the prompt's full blocks (block size 4)
//	pick tokens=(…) [salt=S] [busy] [reason-only]
//	                                 Pick by tokens; reason-only hides a choice made by a
//	                                 hash of the tokens (the per-process seed)
//
// After every command it prints each backend's load.
type policyScenario struct {
	t        *testing.T
	policy   Policy
	names    map[string]*Backend // by script name
	order    []string            // current candidates, in join order
	sessions map[string]string   // script name → session ID
	out      strings.Builder
}

func (s *policyScenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

func (s *policyScenario) backend(d *datadriven.TestData, name string) *Backend {
	b := s.names[name]
	if b == nil {
		s.t.Fatalf("%s: no backend %q", d.Pos, name)
	}
	return b
}

func (s *policyScenario) cands() []*Backend {
	out := make([]*Backend, len(s.order))
	for i, n := range s.order {
		out[i] = s.names[n]
	}
	return out
}

func (s *policyScenario) nameOf(b *Backend) string {
	for n, x := range s.names {
		if x == b {
			return n
		}
	}
	return "?"
}

func listArg(d *datadriven.TestData, key string) []string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

func tokensArg(t *testing.T, d *datadriven.TestData) []int32 {
	var out []int32
	for _, v := range listArg(d, "tokens") {
		if v == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(v, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil {
			t.Fatalf("%s: bad token %q", d.Pos, v)
		}
		for x := a; x <= b; x++ {
			out = append(out, int32(x))
		}
	}
	return out
}

// rendezvousOrder is the candidates' order for key, best first.
func rendezvousOrder(key uint64, c []*Backend) []*Backend {
	out := slices.Clone(c)
	slices.SortFunc(out, func(a, b *Backend) int {
		sa, sb := score(key, a), score(key, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return out
}

func (s *policyScenario) run(d *datadriven.TestData) {
	t := s.t
	switch d.Cmd {
	case "policy":
		cfg := PolicyConfig{}
		if d.HasArg("bound") {
			d.ScanArgs(t, "bound", &cfg.LoadBound)
		}
		if d.HasArg("threshold") {
			d.ScanArgs(t, "threshold", &cfg.ConcurrencyThreshold)
		}
		if d.HasArg("penalty") {
			d.ScanArgs(t, "penalty", &cfg.LoadPenalty)
		}
		var name string
		d.ScanArgs(t, "name", &name)
		p, err := NewPolicy(name, cfg)
		if err != nil {
			s.printf("error: %v\n", err)
			return
		}
		s.policy = p
	case "add":
		reuse := 0
		if d.HasArg("reuse") {
			d.ScanArgs(t, "reuse", &reuse)
		}
		for _, n := range listArg(d, "b") {
			// A re-add makes a new Backend, as Router.AddBackend does: same URL, so same ID
			// and rendezvous seed, and an empty index.
			b, err := newBackend("http://" + n + ":8080")
			if err != nil {
				t.Fatal(err)
			}
			b.events = liveStats{}
			b.index.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 4, ReuseBlocks: reuse})
			s.names[n] = b
			if !slices.Contains(s.order, n) {
				s.order = append(s.order, n)
			}
		}
	case "remove":
		for _, n := range listArg(d, "b") {
			s.backend(d, n)
			s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == n })
		}
	case "load":
		for _, a := range d.CmdArgs {
			n, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				t.Fatalf("%s: load %s=%q", d.Pos, a.Key, a.Vals[0])
			}
			s.backend(d, a.Key).inflight.Store(int64(n))
		}
	case "session":
		var name string
		d.ScanArgs(t, "name", &name)
		want := listArg(d, "order")
		for i := 0; ; i++ {
			if i == 100000 {
				t.Fatalf("%s: no session with order %v", d.Pos, want)
			}
			id := fmt.Sprintf("%s-%d", name, i)
			key, _ := (&Request{SessionID: id}).affinityKey(0)
			got := rendezvousOrder(key, s.cands())
			ok := len(got) >= len(want)
			for j := 0; ok && j < len(want); j++ {
				ok = s.nameOf(got[j]) == want[j]
			}
			if ok {
				s.sessions[name] = id
				break
			}
		}
	case "index":
		var name string
		d.ScanArgs(t, "b", &name)
		tier := kvtier.Device
		if d.HasArg("tier") {
			var v string
			d.ScanArgs(t, "tier", &v)
			tier = map[string]kvtier.Tier{"device": kvtier.Device, "host": kvtier.Host, "disk": kvtier.Disk, "remote": kvtier.Remote}[v]
		}
		salt := ""
		if d.HasArg("salt") {
			d.ScanArgs(t, "salt", &salt)
		}
		hs := prefix.BlockHashes(prefix.Root([]byte{0}, salt), tokensArg(t, d), 4)
		evs := make([]kvevents.Event, len(hs))
		for i, h := range hs {
			evs[i] = kvevents.Event{Kind: kvevents.Stored, Tier: tier, Hash: h, Time: time.Now()}
		}
		s.backend(d, name).index.Apply(evs)
	case "pick":
		req := &Request{}
		label := ""
		if d.HasArg("session") {
			var name string
			d.ScanArgs(t, "session", &name)
			id, ok := s.sessions[name]
			if !ok {
				t.Fatalf("%s: no session %q", d.Pos, name)
			}
			req.SessionID, label = id, name
		} else {
			req.Tokens = tokensArg(t, d)
			label = fmt.Sprintf("%d tokens", len(req.Tokens))
			if d.HasArg("salt") {
				d.ScanArgs(t, "salt", &req.Salt)
			}
		}
		dec := s.policy.Pick(req, s.cands())
		chosen := s.nameOf(dec.Backend)
		if d.HasArg("reason-only") {
			chosen = "…" // chosen by a hash of the tokens and the backends' URLs
		}
		s.printf("%s → %s (%s", label, chosen, dec.Reason)
		if dec.PredictedTokens > 0 {
			s.printf(", predicted %d tokens", dec.PredictedTokens)
		}
		s.printf(")\n")
		if d.HasArg("busy") {
			dec.Backend.inflight.Add(1)
		}
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
}

func TestPolicyScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/policy", func(t *testing.T, path string) {
		s := &policyScenario{t: t, names: map[string]*Backend{}, sessions: map[string]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.out.Reset()
			s.run(d)
			var loads []string
			for _, n := range s.order {
				loads = append(loads, fmt.Sprintf("%s=%d", n, s.names[n].Load()))
			}
			s.printf("load %s\n", strings.Join(loads, " "))
			return s.out.String()
		})
	})
}
