package router

import (
	"fmt"
	"testing"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// liveStats fakes an in-sync event stream.
type liveStats struct{}

func (liveStats) Stats() kvevents.SubscriberStats {
	return kvevents.SubscriberStats{Synced: true, LastEvent: time.Now()}
}

func testBackends(t *testing.T, n int) []*Backend {
	t.Helper()
	out := make([]*Backend, n)
	for i := range out {
		b, err := newBackend(fmt.Sprintf("http://10.0.0.%d:8080", i+1))
		if err != nil {
			t.Fatal(err)
		}
		b.events = liveStats{}
		b.index.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 4})
		out[i] = b
	}
	return out
}

func without(bs []*Backend, drop *Backend) []*Backend {
	var out []*Backend
	for _, b := range bs {
		if b != drop {
			out = append(out, b)
		}
	}
	return out
}

// TestPrefixRemapOnScale: rendezvous hashing moves only the removed
// backend's sessions when one of four goes, and about 1/5 when a fifth comes.
func TestPrefixRemapOnScale(t *testing.T) {
	bs := testBackends(t, 5)
	four := bs[:4]
	const sessions = 4000
	// A fresh policy per assignment: the rendezvous order alone, without
	// the sticky memory.
	assign := func(c []*Backend) []*Backend {
		p, _ := NewPolicy("prefix", PolicyConfig{})
		out := make([]*Backend, sessions)
		for i := range out {
			out[i] = p.Pick(&Request{SessionID: fmt.Sprint("session-", i)}, c).Backend
		}
		return out
	}
	before := assign(four)
	share := map[*Backend]int{}
	for _, b := range before {
		share[b]++
	}
	for _, b := range four {
		if f := float64(share[b]) / sessions; f < 0.2 || f > 0.3 {
			t.Errorf("backend %s has %.3f of sessions, want ~0.25", b.ID, f)
		}
	}
	removed := four[2]
	after := assign(without(four, removed))
	moved, onRemoved, movedOthers := 0, 0, 0
	for i := range before {
		if before[i] == removed {
			onRemoved++
		}
		if before[i] != after[i] {
			moved++
			if before[i] != removed {
				movedOthers++
			}
		}
	}
	t.Logf("remove 1 of 4: %d/%d sessions remapped (%.3f); %d were on the removed backend; %d others moved",
		moved, sessions, float64(moved)/sessions, onRemoved, movedOthers)
	if movedOthers != 0 {
		t.Errorf("remove: %d sessions not on the removed backend moved, want 0", movedOthers)
	}
	added := assign(bs)
	movedAdd := 0
	for i := range before {
		if before[i] != added[i] {
			movedAdd++
			if added[i] != bs[4] {
				t.Fatalf("add: session %d moved between old backends", i)
			}
		}
	}
	t.Logf("add a 5th: %d/%d sessions remapped (%.3f, ideal 0.200)", movedAdd, sessions, float64(movedAdd)/sessions)
	if f := float64(movedAdd) / sessions; f > 0.25 {
		t.Errorf("add: remapped %.3f, want about 0.2", f)
	}
	// With the sticky memory (one policy throughout), adding a backend
	// moves no live session: new sessions fill it.
	p, _ := NewPolicy("prefix", PolicyConfig{})
	for i := range sessions {
		p.Pick(&Request{SessionID: fmt.Sprint("session-", i)}, four)
	}
	stuck := 0
	for i := range sessions {
		if p.Pick(&Request{SessionID: fmt.Sprint("session-", i)}, bs).Backend == before[i] {
			stuck++
		}
	}
	if stuck != sessions {
		t.Errorf("sticky: %d of %d sessions stayed after adding a backend, want all", stuck, sessions)
	}
}

// TestPrefixBoundedLoad: a hot key spills to its next candidate when its
// first choice is over the load cap or the concurrency threshold.
func TestPrefixBoundedLoad(t *testing.T) {
	bs := testBackends(t, 3)
	p, _ := NewPolicy("prefix", PolicyConfig{ConcurrencyThreshold: 4})
	req := &Request{SessionID: "hot"}
	first := p.Pick(req, bs)
	if first.Reason != "affinity" {
		t.Fatalf("reason %q, want affinity", first.Reason)
	}
	first.Backend.inflight.Store(4) // busy
	second := p.Pick(req, bs)
	if second.Backend == first.Backend || second.Reason != "spill" {
		t.Fatalf("busy first choice: got %s (%s), want another backend by spill", second.Backend.ID, second.Reason)
	}
	first.Backend.inflight.Store(2) // under threshold but over ceil(1.25*3/3)=2
	if d := p.Pick(req, bs); d.Backend == first.Backend {
		t.Fatalf("over the load bound: still chose %s", d.Backend.ID)
	}
	// Sticky: the spill target holds the key's freshest prefix, so the key
	// stays there while it has room, and goes back only when it is busy.
	first.Backend.inflight.Store(0)
	if d := p.Pick(req, bs); d.Backend != second.Backend {
		t.Fatalf("after a spill: got %s, want the spill target %s", d.Backend.ID, second.Backend.ID)
	}
	second.Backend.inflight.Store(4)
	if d := p.Pick(req, bs); d.Backend != first.Backend || d.Reason != "affinity" {
		t.Fatalf("spill target busy: got %s (%s), want the first choice back", d.Backend.ID, d.Reason)
	}
}

func storeChain(b *Backend, hs []prefix.Hash, tier kvtier.Tier) {
	evs := make([]kvevents.Event, len(hs))
	for i, h := range hs {
		evs[i] = kvevents.Event{Kind: kvevents.Stored, Tier: tier, Hash: h, Time: time.Now()}
	}
	b.index.Apply(evs)
}

func toks(n, seed int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(seed*1000 + i)
	}
	return out
}

// TestKVAware: the longest (tier-weighted) match wins, load is a penalty,
// ties go by rendezvous order (the same on every router), and no match falls back to affinity.
func TestKVAware(t *testing.T) {
	bs := testBackends(t, 3)
	p, _ := NewPolicy("kv-aware", PolicyConfig{})
	root := prefix.Root([]byte{0}, "")
	prompt := toks(40, 1) // 10 blocks of 4
	hs := prefix.BlockHashes(root, prompt, 4)
	storeChain(bs[0], hs[:3], kvtier.Device)
	storeChain(bs[1], hs[:8], kvtier.Disk) // 8 × 0.5 = 4 > 3
	storeChain(bs[2], hs[:5], kvtier.Host) // 5 × 0.8 = 4 + a hole after
	d := p.Pick(&Request{Tokens: prompt}, bs)
	if d.Reason != "cache" {
		t.Fatalf("reason %q", d.Reason)
	}
	// bs[1] and bs[2] tie at 4.0: the tie goes by the prompt's rendezvous order, the same on
	// every pick and for a second policy (another router); over many tied prompts both win.
	other, _ := NewPolicy("kv-aware", PolicyConfig{})
	first := d.Backend
	for range 20 {
		if d := p.Pick(&Request{Tokens: prompt}, bs); d.Backend != first {
			t.Fatalf("a tie picked %s, then %s", first.ID, d.Backend.ID)
		}
	}
	if d := other.Pick(&Request{Tokens: prompt}, bs); d.Backend != first {
		t.Fatalf("another policy broke the tie to %s, this one to %s", d.Backend.ID, first.ID)
	}
	if first == bs[0] {
		t.Fatal("chose the shortest match")
	}
	seen := map[string]int{}
	for i := range 200 {
		pr := toks(40, 100+i)
		h := prefix.BlockHashes(root, pr, 4)
		storeChain(bs[1], h[:8], kvtier.Disk)
		storeChain(bs[2], h[:5], kvtier.Host)
		seen[p.Pick(&Request{Tokens: pr}, bs).Backend.ID]++
	}
	if seen[bs[1].ID] < 50 || seen[bs[2].ID] < 50 {
		t.Fatalf("ties over 200 prompts not spread: %v", seen)
	}
	// Load penalty: bs[2] busy with 1 request loses to bs[1].
	bs[2].inflight.Store(1)
	if d := p.Pick(&Request{Tokens: prompt}, bs); d.Backend != bs[1] || d.PredictedTokens != 32 {
		t.Fatalf("with load: got %s predicted %d, want %s predicted 32", d.Backend.ID, d.PredictedTokens, bs[1].ID)
	}
	bs[2].inflight.Store(0)
	// Another salt shares nothing: fallback to affinity.
	if d := p.Pick(&Request{Tokens: prompt, Salt: "tenant-b"}, bs); d.Reason != "fallback-affinity" || d.PredictedTokens != 0 {
		t.Fatalf("other salt: %+v", d)
	}
	// A stale index is ignored.
	for _, b := range bs {
		b.events = nil
	}
	if d := p.Pick(&Request{Tokens: prompt}, bs); d.Reason != "fallback-affinity" {
		t.Fatalf("no live index: reason %q, want fallback-affinity", d.Reason)
	}
}

// TestNoHotSpotOnTies: with every replica holding the same shared prefix,
// a burst of arrivals spreads instead of piling on one backend.
func TestNoHotSpotOnTies(t *testing.T) {
	bs := testBackends(t, 4)
	root := prefix.Root([]byte{0}, "")
	prompt := toks(16, 2)
	for _, b := range bs {
		storeChain(b, prefix.BlockHashes(root, prompt, 4), kvtier.Device)
	}
	for _, name := range []string{"kv-aware", "least-loaded"} {
		p, _ := NewPolicy(name, PolicyConfig{})
		for _, b := range bs {
			b.inflight.Store(0)
		}
		// 40 arrivals, none finishing: each pick adds load.
		for range 40 {
			d := p.Pick(&Request{Tokens: prompt}, bs)
			d.Backend.inflight.Add(1)
		}
		for _, b := range bs {
			if l := b.Load(); l < 8 || l > 12 {
				t.Errorf("%s: backend %s took %d of 40 (want ~10)", name, b.ID, l)
			}
		}
	}
}
