package router

import (
	"sync"
	"testing"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// clockStats fakes an in-sync stream whose heartbeats arrive on a test clock.
type clockStats struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clockStats) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func (c *clockStats) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clockStats) Stats() kvevents.SubscriberStats {
	return kvevents.SubscriberStats{Synced: true, LastEvent: c.clock()} // a heartbeat just came
}

func storeTokens(b *Backend, tier kvtier.Tier, toks []int32, at time.Time) []prefix.Hash {
	hs := prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, 4)
	evs := make([]kvevents.Event, len(hs))
	for i, h := range hs {
		evs[i] = kvevents.Event{Kind: kvevents.Stored, Tier: tier, Hash: h, Time: at}
	}
	b.index.Apply(evs)
	return hs
}

func seqTokens(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// TestIndexFreshness: a block stored once and then only hit (hits emit no events) is still
// scored after 30 minutes, and after 5 hours, of test-clock time while the stream's
// heartbeats keep coming; only a Removed event ends it.
func TestIndexFreshness(t *testing.T) {
	clk := &clockStats{now: time.Unix(1_700_000_000, 0)}
	bs := testBackends(t, 2)
	for _, b := range bs {
		b.events = clk
	}
	p, err := NewPolicy("kv-aware", PolicyConfig{Now: clk.clock})
	if err != nil {
		t.Fatal(err)
	}
	prompt := seqTokens(65, 1000) // 16 full blocks, all usable (the 65th token is computed)
	hs := storeTokens(bs[1], kvtier.Device, prompt, clk.clock())
	pick := func(label string) Decision {
		t.Helper()
		d := p.Pick(&Request{Tokens: prompt}, bs)
		if d.Backend != bs[1] || d.Reason != "cache" || d.PredictedTokens != 64 {
			t.Fatalf("%s: picked %s (%s, predicted %d); want the holder, cache, 64", label, d.Backend.ID, d.Reason, d.PredictedTokens)
		}
		return d
	}
	pick("fresh")
	for range 30 { // a hit a minute, no stores
		clk.advance(time.Minute)
		pick("hit")
	}
	pick("after 30 minutes")
	clk.advance(5 * time.Hour)
	pick("after 5h30")
	// Removed is what ends an entry.
	bs[1].index.Apply([]kvevents.Event{{Kind: kvevents.Removed, Tier: kvtier.Device, Hash: hs[0]}})
	if d := p.Pick(&Request{Tokens: prompt}, bs); d.Reason == "cache" {
		t.Fatalf("after Removed of the first block: %s (predicted %d)", d.Reason, d.PredictedTokens)
	}
	// A stream that stops speaking is still distrusted (StaleAfter), on the same clock.
	storeTokens(bs[1], kvtier.Device, prompt, clk.clock())
	stale := &clockStats{now: clk.clock()}
	bs[1].events = stale
	clk.advance(time.Minute)
	if d := p.Pick(&Request{Tokens: prompt}, bs); d.Reason == "cache" {
		t.Fatalf("a silent stream's index was used: %s", d.Reason)
	}
}

// TestIndexBound: a replica that never sends Removed cannot grow its index past the bound;
// the least recently stored entries go first, and a re-stored one survives.
func TestIndexBound(t *testing.T) {
	ix := newReplicaIndex()
	ix.maxBlocks = 64
	ix.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 4})
	h := func(i int) prefix.Hash {
		var x prefix.Hash
		x[0], x[1] = byte(i), byte(i>>8)
		return x
	}
	keep := h(0)
	for i := range 1000 {
		ix.Apply([]kvevents.Event{{Kind: kvevents.Stored, Tier: kvtier.Host, Hash: h(i)}})
		if i%10 == 0 { // a hot block, re-stored now and then
			ix.Apply([]kvevents.Event{{Kind: kvevents.Stored, Tier: kvtier.Device, Hash: keep}})
		}
		if n := ix.Len(); n > 64 {
			t.Fatalf("after %d stores the index holds %d > 64", i+1, n)
		}
	}
	if n, _ := ix.match([]prefix.Hash{keep}, &defaultTierWeights, nil); n != 1 {
		t.Fatal("the recently re-stored block was dropped")
	}
	if n, _ := ix.match([]prefix.Hash{h(999)}, &defaultTierWeights, nil); n != 1 {
		t.Fatal("the newest block was dropped")
	}
	if n, _ := ix.match([]prefix.Hash{h(1)}, &defaultTierWeights, nil); n != 0 {
		t.Fatal("the oldest block survived")
	}
	// A snapshot larger than the bound is cut to it too.
	blocks := make([]kvevents.Block, 500)
	for i := range blocks {
		blocks[i] = kvevents.Block{Hash: h(i), Tier: kvtier.Disk}
	}
	ix.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 4, Blocks: blocks})
	if n := ix.Len(); n > 64 {
		t.Fatalf("snapshot of 500 left %d entries", n)
	}
}

// TestTierWeightsFromCosts: published cost figures replace the defaults, and weigh a tier by
// the share of prefill its read saves.
func TestTierWeightsFromCosts(t *testing.T) {
	c := kvevents.Costs{PrefillTokensPerSecond: 1000, BlockSize: 16, BlockBytes: 1 << 20}
	c.ReadBandwidth[kvtier.Host] = 10e9   // 0.1 ms of a 16 ms prefill
	c.ReadBandwidth[kvtier.Disk] = 128e6  // 8.2 ms: about half
	c.ReadBandwidth[kvtier.Remote] = 32e6 // 33 ms: slower than recompute
	w := tierWeights(c)
	if w[kvtier.Device] != 1 || !(w[kvtier.Host] > 0.99) || !(w[kvtier.Disk] > 0.45 && w[kvtier.Disk] < 0.55) || w[kvtier.Remote] != 0 {
		t.Fatalf("weights %v", w)
	}
	ix := newReplicaIndex()
	if got, remote := ix.weights(&defaultTierWeights); got != defaultTierWeights || remote {
		t.Fatalf("before any figure: %v %v, want the defaults", got, remote)
	}
	ix.Costs(c)
	if got, remote := ix.weights(&defaultTierWeights); got != w || !remote {
		t.Fatalf("after costs: %v %v", got, remote)
	}
	// A snapshot carries the figures; one without (a restarted replica without tiers, an
	// isolated one) goes back to the defaults.
	ix.Reset(kvevents.Snapshot{Epoch: 2, Identity: "00", BlockSize: 4, Costs: &c})
	if got, _ := ix.weights(&defaultTierWeights); got != w {
		t.Fatalf("snapshot costs: %v", got)
	}
	ix.Reset(kvevents.Snapshot{Epoch: 3, Identity: "00", BlockSize: 4})
	if got, remote := ix.weights(&defaultTierWeights); got != defaultTierWeights || remote {
		t.Fatalf("snapshot without costs: %v %v", got, remote)
	}
	// Figures without a prefill rate fall back to the defaults.
	if got := tierWeights(kvevents.Costs{BlockSize: 16, BlockBytes: 1}); got != defaultTierWeights {
		t.Fatalf("no prefill rate: %v", got)
	}
}

// TestRemoteShared: a block one replica wrote to the remote tier counts, at the remote
// weight, for every replica that has the remote tier, and for none without it.
func TestRemoteShared(t *testing.T) {
	bs := testBackends(t, 3)
	withRemote := kvevents.Costs{PrefillTokensPerSecond: 1000, BlockSize: 4, BlockBytes: 1 << 10}
	withRemote.ReadBandwidth[kvtier.Host] = 10e9
	withRemote.ReadBandwidth[kvtier.Remote] = 1e9
	hostOnly := withRemote
	hostOnly.ReadBandwidth[kvtier.Remote] = 0
	bs[0].index.Costs(withRemote)
	bs[1].index.Costs(withRemote)
	bs[2].index.Costs(hostOnly)
	prompt := seqTokens(33, 7) // 8 full blocks, all usable
	storeTokens(bs[0], kvtier.Remote, prompt, time.Now())
	p, _ := NewPolicy("kv-aware", PolicyConfig{})
	for _, b := range bs {
		id, bsz, _ := b.index.chain()
		rq := &Request{Tokens: prompt}
		w, hasRemote := b.index.weights(&defaultTierWeights)
		var sh []*replicaIndex
		if hasRemote {
			sh = []*replicaIndex{bs[0].index, bs[1].index, bs[2].index}
		}
		n, _ := b.index.match(rq.blockHashes(id, bsz), &w, sh)
		want := 8
		if b == bs[2] {
			want = 0
		}
		if n != want {
			t.Errorf("backend %s matches %d blocks, want %d", b.ID, n, want)
		}
	}
	// The policy: replicas 0 and 1 tie on the remote blocks (the tie goes by each prompt's
	// rendezvous order, so over many prompts both win); 2 never wins on them.
	seen := map[*Backend]int{}
	for i := range 200 {
		pr := seqTokens(33, int32(1000+100*i))
		storeTokens(bs[0], kvtier.Remote, pr, time.Now())
		d := p.Pick(&Request{Tokens: pr}, bs)
		if d.Reason != "cache" || d.PredictedTokens != 32 {
			t.Fatalf("pick: %s predicted %d", d.Reason, d.PredictedTokens)
		}
		seen[d.Backend]++
	}
	if seen[bs[2]] != 0 || seen[bs[0]] < 50 || seen[bs[1]] < 50 {
		t.Fatalf("picks %v: want 0 and 1 shared, never 2", seen)
	}
	// Host beats remote: replica 1 holding the blocks in host wins them.
	storeTokens(bs[1], kvtier.Host, prompt, time.Now())
	for range 20 {
		if d := p.Pick(&Request{Tokens: prompt}, bs); d.Backend != bs[1] {
			t.Fatalf("host holder lost to %s (%s)", d.Backend.ID, d.Reason)
		}
	}
}

// TestSharedRemoteOutlivesWriter: the router-wide remote set keeps what a replica announced in
// remote after that replica's own index forgot it (a restart's snapshot, isolation), so
// another replica with the tier is still scored on it; a remote Removed from any replica
// ends the entry, and the set is bounded.
func TestSharedRemoteOutlivesWriter(t *testing.T) {
	bs := testBackends(t, 2)
	shared := sharedRemote(64)
	withRemote := kvevents.Costs{PrefillTokensPerSecond: 1000, BlockSize: 4, BlockBytes: 1 << 10}
	withRemote.ReadBandwidth[kvtier.Remote] = 1e9
	for _, b := range bs {
		b.index.remote = shared
		b.index.Costs(withRemote)
	}
	writer, other := bs[0], bs[1]
	prompt := seqTokens(33, 7) // 8 full blocks, all usable
	hs := storeTokens(writer, kvtier.Remote, prompt, time.Now())
	storeTokens(writer, kvtier.Device, prompt, time.Now()) // device bits stay out of the set
	p, _ := NewPolicy("kv-aware", PolicyConfig{})
	pick := func(c []*Backend) Decision { return p.Pick(&Request{Tokens: prompt, remote: shared}, c) }
	// The writer restarts: its snapshot has none of it. The other replica is still steered
	// to restore it, and so is the writer itself.
	writer.index.Reset(kvevents.Snapshot{Epoch: 2, Identity: "00", BlockSize: 4})
	if writer.index.Len() != 0 || shared.Len() != 8 {
		t.Fatalf("after the writer's restart: writer index %d, shared %d; want 0 and 8", writer.index.Len(), shared.Len())
	}
	if d := pick([]*Backend{other}); d.Reason != "cache" || d.PredictedTokens != 32 {
		t.Fatalf("other replica after the writer's restart: %+v", d)
	}
	// The writer is gone from the candidates (killed, removed): the same.
	if d := pick([]*Backend{other}); d.Backend != other || d.PredictedTokens != 32 {
		t.Fatalf("without the writer: %+v", d)
	}
	// A snapshot with remote blocks adds them; a remote Removed from the other replica (its
	// reconciler found a key gone from the shared tier) ends one for everyone.
	other.index.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 4, Costs: &withRemote,
		Blocks: []kvevents.Block{{Hash: hs[0], Tier: kvtier.Remote}}})
	other.index.Apply([]kvevents.Event{{Kind: kvevents.Removed, Tier: kvtier.Remote, Hash: hs[3]}})
	if d := pick([]*Backend{other}); d.PredictedTokens != 12 {
		t.Fatalf("after a remote Removed of block 3: predicted %d, want 12", d.PredictedTokens)
	}
	// A Removed in another tier does not touch the shared set.
	other.index.Apply([]kvevents.Event{{Kind: kvevents.Removed, Tier: kvtier.Device, Hash: hs[0]}})
	if shared.Len() != 7 {
		t.Fatalf("shared %d after a device Removed, want 7", shared.Len())
	}
	// Bounded: 64 entries at most, the least recently stored first out.
	for i := range 20 {
		storeTokens(writer, kvtier.Remote, seqTokens(32, int32(10000+100*i)), time.Now())
	}
	if n := shared.Len(); n > 64 {
		t.Fatalf("shared set %d entries, bound 64", n)
	}
	if d := pick([]*Backend{other}); d.PredictedTokens != 4 { // block 0: the other's own snapshot
		t.Fatalf("the oldest entries survived the bound: predicted %d, want 4", d.PredictedTokens)
	}
	// A remote Cleared empties it.
	writer.index.Apply([]kvevents.Event{{Kind: kvevents.Cleared, Tier: kvtier.Remote}})
	if shared.Len() != 0 {
		t.Fatalf("shared %d after a remote Cleared", shared.Len())
	}
}
