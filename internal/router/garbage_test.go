package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// fakeReplica serves /health and a real publisher's /v1/kv-events; while garbage is set,
// its stream sends that line after the hello instead (and a clean stream in progress ends).
type fakeReplica struct {
	pub     *kvevents.Publisher
	garbage atomic.Value // string
	srv     *httptest.Server
}

func newFakeReplica(t *testing.T) *fakeReplica {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.Config{Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pub.SetIdentity("00", 4)
	f := &fakeReplica{pub: pub}
	f.garbage.Store("")
	events := pub.Handler()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.Write([]byte(`{"status":"ok"}`))
			return
		}
		g := f.garbage.Load().(string)
		if g != "" && !strings.HasSuffix(r.URL.Path, "/snapshot") {
			hello := `{"type":"hello","epoch":"` + strconv.FormatUint(pub.Epoch(), 16) + `","seq":` + strconv.FormatUint(pub.Seq(), 10) + `}`
			w.Write([]byte(hello + "\n" + g + "\n"))
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			for ctx.Err() == nil && f.garbage.Load().(string) == "" {
				time.Sleep(2 * time.Millisecond)
			}
			cancel()
		}()
		events.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeReplica) store(toks []int32) {
	for _, h := range prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, 4) {
		f.pub.Publish(kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Host, Hash: h})
	}
}

// TestGarbageReplicaIsolated: a replica whose event stream turns to garbage has its index
// dropped, so kv-aware stops preferring it (it scores as holding nothing and gets only what
// its load earns), and it is trusted again after a clean resync.
func TestGarbageReplicaIsolated(t *testing.T) {
	good, bad := newFakeReplica(t), newFakeReplica(t)
	prompt := seqTokens(33, 500) // 8 full blocks, all usable
	good.store(prompt[:16])      // 4 blocks
	bad.store(prompt)            // all 8: the better holder while it is trusted
	cfg := DefaultConfig()
	cfg.Policy = "kv-aware"
	cfg.Backends = []string{good.srv.URL, bad.srv.URL}
	cfg.HealthInterval = 50 * time.Millisecond
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	waitSynced(t, rt)
	var gb, bb *Backend
	for _, b := range rt.backends() {
		if b.URL.String() == good.srv.URL {
			gb = b
		} else {
			bb = b
		}
	}
	pick := func() Decision { return rt.policy.Pick(&Request{Tokens: prompt}, rt.backends()) }
	waitUntil(t, "both indexes", func() bool { return gb.index.Len() == 4 && bb.index.Len() == 8 })
	if d := pick(); d.Backend != bb || d.PredictedTokens != 32 {
		t.Fatalf("before garbage: %s predicted %d, want the full holder", d.Backend.URL, d.PredictedTokens)
	}
	for _, g := range []string{`{"type":"event","seq":1,"kind":"stored","tier":"ssd","hash":""}`, `{{{`,
		`{"type":"costs","seq":0,"costs":{"prefill_tps":"fast"}}`} {
		bad.garbage.Store(g)
		waitUntil(t, "isolation of "+g, func() bool {
			return bb.index.Len() == 0 && bb.status().Events.Garbage > 0 && !bb.liveIndex(time.Minute)
		})
		for range 20 {
			if d := pick(); d.Backend != gb || d.Reason != "cache" || d.PredictedTokens != 16 {
				t.Fatalf("%s: isolated replica still scored: %s (%s, predicted %d)", g, d.Backend.URL, d.Reason, d.PredictedTokens)
			}
		}
		bad.garbage.Store("")
		waitUntil(t, "clean resync", func() bool { return bb.index.Len() == 8 && bb.liveIndex(time.Minute) })
		if d := pick(); d.Backend != bb {
			t.Fatalf("%s: after a clean resync the full holder lost: %s", g, d.Backend.URL)
		}
	}
	if got := counterSum(t, rt, "stockpot_router_event_garbage_total", "", ""); got < 3 {
		t.Fatalf("stockpot_router_event_garbage_total = %v, want ≥ 3", got)
	}
}
