package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TestBoundLoadOneStaleReport: the load bound counts another router's requests from the
// replica's reports, but a report that still shows a request that has finished is outvoted
// by the report before it; this router's own requests count once, however old the report.
func TestBoundLoadOneStaleReport(t *testing.T) {
	bs := testBackends(t, 1)
	b := bs[0]
	now := time.Now()
	if b.boundLoad() != 0 || b.policyLoad() != 0 {
		t.Fatal("load without a report")
	}
	b.storeReport(kvevents.Load{}, now)
	b.storeReport(kvevents.Load{Waiting: 1}, now) // another router's request, queued
	b.storeReport(kvevents.Load{Running: 1}, now) // admitted: the same total
	if got, want := b.policyLoad(), 1; got != want {
		t.Fatalf("penalty load %d, want %d", got, want)
	}
	if got := b.boundLoad(); got != 0 {
		t.Fatalf("bound load %d, want 0: one report of a request is not enough for the bound", got)
	}
	b.storeReport(kvevents.Load{Running: 2}, now)
	b.storeReport(kvevents.Load{Running: 3}, now)
	if got, want := b.boundLoad(), 2; got != want {
		t.Fatalf("bound load %d, want %d (the report before the last)", got, want)
	}
	// This router sends 2 more; a report older than them counts them once, in own.
	b.inflight.Store(2)
	if got, want := b.boundLoad(), 4; got != want {
		t.Fatalf("bound load %d, want %d", got, want)
	}
	// The report that includes them: 5 in all, of which 2 are this router's.
	b.storeReport(kvevents.Load{Running: 5}, now)
	if got, want := b.boundLoad(), 2+3; got != want {
		t.Fatalf("bound load %d, want %d", got, want)
	}
	if got, want := b.policyLoad(), 2+3; got != want {
		t.Fatalf("penalty load %d, want %d", got, want)
	}
	// A resync forgets the report: own count only.
	backendSink{b.index, b}.Reset(kvevents.Snapshot{Epoch: 2, Identity: "00", BlockSize: 4})
	if got := b.boundLoad(); got != 2 {
		t.Fatalf("bound load after a resync %d, want 2", got)
	}
	st := b.status()
	if st.Replica != nil {
		t.Fatalf("replica load shown after a resync: %+v", st.Replica)
	}
	b.storeReport(kvevents.Load{Running: 4, QueuedPrefillTokens: 100, KVUsage: 0.5}, now)
	raw, _ := json.Marshal(b.status())
	for _, want := range []string{`"running":4`, `"queued_prefill_tokens":100`, `"kv_usage":0.5`, `"others":2`, `"load":4`, `"bound_load":4`} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("GET /backends row %s lacks %s", raw, want)
		}
	}
}

// TestKVAwareBoundReadsReplicas: kv-aware's cache pick stays on the replica that holds the
// prompt when its one report lags a finished request (the two-router session case), and
// leaves it when the replicas' reports say other routers keep it full.
func TestKVAwareBoundReadsReplicas(t *testing.T) {
	bs := testBackends(t, 3)
	p, _ := NewPolicy("kv-aware", PolicyConfig{})
	prompt := toks(40, 7)
	hs := prefix.BlockHashes(prefix.Root([]byte{0}, ""), prompt, 4)
	storeChain(bs[0], hs[:8], kvtier.Device)
	now := time.Now()
	for _, b := range bs {
		b.storeReport(kvevents.Load{}, now)
	}
	// Another router's turn of the session ran on bs[0]; the report saying it finished has
	// not arrived yet.
	bs[0].storeReport(kvevents.Load{Running: 1}, now)
	if d := p.Pick(&Request{Tokens: prompt}, bs); d.Backend != bs[0] || d.Reason != "cache" {
		t.Fatalf("stale report: picked %s (%s), want %s by cache", d.Backend.ID, d.Reason, bs[0].ID)
	}
	// Other routers keep bs[0] at 6 requests over several reports: past the bound
	// (ceil(1.25·(5+1)/3) = 3), though this router sends it nothing.
	for n := 2; n <= 6; n++ {
		bs[0].storeReport(kvevents.Load{Running: n}, now)
	}
	d := p.Pick(&Request{Tokens: prompt}, bs)
	if d.Backend == bs[0] {
		t.Fatalf("picked %s, which the replicas report full (bound load %d)", d.Backend.ID, bs[0].boundLoad())
	}
	// The prefix policy's bound stays on this router's own count: its sessions keep their
	// rendezvous choice, bs[0] included.
	pp, _ := NewPolicy("prefix", PolicyConfig{})
	on0 := 0
	for s := range 60 {
		if d := pp.Pick(&Request{SessionID: fmt.Sprint("s-", s)}, bs); d.Backend == bs[0] {
			on0++
			if d.Reason != "affinity" {
				t.Fatalf("prefix: %s for a session on %s", d.Reason, bs[0].ID)
			}
		}
	}
	if on0 == 0 {
		t.Fatal("prefix: no session on the replica other routers load")
	}
}

// TestKVAwareReadsQueueAndKVUsage: kv-aware weighs the blocks of prompt a replica reports
// queued for prefill against the blocks it holds (both are blocks of prefill), and treats a
// replica whose running requests hold KVUsageMax of its pool as at its bound; one stale
// report moves neither.
func TestKVAwareReadsQueueAndKVUsage(t *testing.T) {
	bs := testBackends(t, 2)
	p, _ := NewPolicy("kv-aware", PolicyConfig{})
	prompt := toks(40, 7) // 10 blocks of 4
	hs := prefix.BlockHashes(prefix.Root([]byte{0}, ""), prompt, 4)
	storeChain(bs[0], hs[:8], kvtier.Device) // bs[0] holds 8 blocks, bs[1] 2
	storeChain(bs[1], hs[:2], kvtier.Device)
	now := time.Now()
	pick := func() *Backend { return p.Pick(&Request{Tokens: prompt}, bs).Backend }
	report := func(b *Backend, ls ...kvevents.Load) {
		for _, l := range ls {
			b.storeReport(l, now)
		}
	}
	report(bs[0], kvevents.Load{})
	report(bs[1], kvevents.Load{})
	if got := pick(); got != bs[0] {
		t.Fatalf("idle fleet: picked %s, want the replica holding 8 blocks", got.ID)
	}
	// bs[0] has 3 blocks (12 tokens) of others' prompts to prefill first: 8-3-2 > 2, it keeps it.
	report(bs[0], kvevents.Load{Waiting: 1, QueuedPrefillTokens: 12}, kvevents.Load{Waiting: 2, QueuedPrefillTokens: 12})
	if got := pick(); got != bs[0] {
		t.Fatalf("3 blocks queued: picked %s, want %s (8 held - 3 queued - 2 load > 2 held)", got.ID, bs[0].ID)
	}
	report(bs[0], kvevents.Load{Waiting: 1, QueuedPrefillTokens: 20}, kvevents.Load{Waiting: 2, QueuedPrefillTokens: 20})
	if got := pick(); got != bs[1] {
		t.Fatalf("5 blocks queued: picked %s, want %s (8 held - 5 queued - 2 load < 2 held)", got.ID, bs[1].ID)
	}
	// 30 blocks queued: bs[1] answers first, though it holds less.
	report(bs[0], kvevents.Load{Waiting: 1, QueuedPrefillTokens: 120}, kvevents.Load{Waiting: 2, QueuedPrefillTokens: 120})
	if got := pick(); got != bs[1] {
		t.Fatalf("30 blocks queued: picked %s, want %s", got.ID, bs[1].ID)
	}
	// One stale report of the backlog (the report before it said idle) is outvoted.
	report(bs[0], kvevents.Load{}, kvevents.Load{Waiting: 2, QueuedPrefillTokens: 120})
	if got := pick(); got != bs[0] {
		t.Fatalf("one report of a backlog: picked %s, want %s", got.ID, bs[0].ID)
	}
	// Running requests hold 95% of bs[0]'s pool over two reports: at its bound.
	report(bs[0], kvevents.Load{Running: 1, KVUsage: 0.95}, kvevents.Load{Running: 2, KVUsage: 0.96})
	if got := pick(); got != bs[1] {
		t.Fatalf("KV usage 0.95: picked %s, want %s", got.ID, bs[1].ID)
	}
	// Disabled by the config: the cache pick stands.
	q, _ := NewPolicy("kv-aware", PolicyConfig{KVUsageMax: 1, PrefillPenalty: -1, LoadPenalty: 0.01})
	if d := q.Pick(&Request{Tokens: prompt}, bs); d.Backend != bs[0] {
		t.Fatalf("KVUsageMax 1: picked %s, want %s", d.Backend.ID, bs[0].ID)
	}
}
