package kvevents

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loadSink is a Sink that records the load lines it gets.
type loadSink struct {
	mu    sync.Mutex
	loads []Load
}

func (s *loadSink) Reset(Snapshot) {}
func (s *loadSink) Apply([]Event)  {}
func (s *loadSink) Load(l Load) {
	s.mu.Lock()
	s.loads = append(s.loads, l)
	s.mu.Unlock()
}
func (s *loadSink) last() (Load, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.loads) == 0 {
		return Load{}, 0
	}
	return s.loads[len(s.loads)-1], len(s.loads)
}

// plainSink is an older router's Sink: no Load method.
type plainSink struct{ applied atomic.Int64 }

func (s *plainSink) Reset(Snapshot)    {}
func (s *plainSink) Apply(evs []Event) { s.applied.Add(int64(len(evs))) }

// TestLoadLines: a replica's load reaches a LoadSink on open and after each change, and a
// Sink without Load (an older router) streams events past the load lines as before.
func TestLoadLines(t *testing.T) {
	p, err := NewPublisher(Config{LoadInterval: 5 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Load]
	cur.Store(&Load{Running: 1, Waiting: 2, QueuedPrefillTokens: 300, KVUsage: 0.25})
	p.SetLoad(LoadFunc(func() Load { return *cur.Load() }))
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ls, old := &loadSink{}, &plainSink{}
	for _, sink := range []Sink{ls, old} {
		sub, err := NewSubscriber(SubscriberConfig{URL: srv.URL, Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = sub.Run(ctx) }()
	}
	waitFor(t, func() bool { l, _ := ls.last(); return l == *cur.Load() })
	_, n := ls.last()
	time.Sleep(30 * time.Millisecond) // several load ticks with nothing changed
	if _, m := ls.last(); m != n {
		t.Fatalf("unchanged load sent again: %d lines, then %d", n, m)
	}
	cur.Store(&Load{Running: 4, QueuedPrefillTokens: 0, KVUsage: 1})
	waitFor(t, func() bool { l, _ := ls.last(); return l == *cur.Load() })
	p.Publish(Event{Kind: Stored, Hash: h(1)})
	waitFor(t, func() bool { return old.applied.Load() == 1 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// FuzzDecodeLoadLine: a load line from a replica never panics the router's parser; what it
// accepts is a load it can use (no negative count, a KV usage in [0, 1]), and what the
// publisher writes decodes to itself.
func FuzzDecodeLoadLine(f *testing.F) {
	l := Load{Running: 3, Waiting: 1, QueuedPrefillTokens: 2048, KVUsage: 0.42}
	f.Add(appendLoadJSON(nil, 9, &l))
	f.Add([]byte(`{"type":"load","seq":1}`))
	f.Add([]byte(`{"type":"load","seq":1,"load":{"running":-1}}`))
	f.Add([]byte(`{"type":"load","seq":1,"load":{"kv_usage":1.5}}`))
	f.Add([]byte(`{"type":"load","seq":1,"load":{"kv_usage":1e400}}`))
	f.Add([]byte(`{"type":"load","seq":1,"load":null}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, _, _, err := decodeLine(line)
		if err != nil || m.Type != "load" {
			return
		}
		got, err := decodeLoad(m.Load)
		if err != nil {
			t.Fatalf("decodeLine accepted a load decodeLoad refuses: %v", err)
		}
		if got.Running < 0 || got.Waiting < 0 || got.QueuedPrefillTokens < 0 || !(got.KVUsage >= 0 && got.KVUsage <= 1) {
			t.Fatalf("accepted load %+v", got)
		}
		again, _, _, err := decodeLine(appendLoadJSON(nil, m.Seq, &got))
		if err != nil {
			t.Fatalf("re-encoded load does not parse: %v", err)
		}
		if back, _ := decodeLoad(again.Load); back != got {
			t.Fatalf("round trip: %+v became %+v", got, back)
		}
	})
}
