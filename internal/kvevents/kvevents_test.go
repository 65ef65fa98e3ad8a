package kvevents

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// mapSink is the dumb oracle-side index: a set of (hash, tier).
type mapSink struct {
	mu     sync.Mutex
	blocks map[Block]bool
	resets int
}

func (m *mapSink) Reset(s Snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resets++
	m.blocks = map[Block]bool{}
	for _, b := range s.Blocks {
		m.blocks[b] = true
	}
}

func (m *mapSink) Apply(evs []Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range evs {
		switch ev.Kind {
		case Stored:
			m.blocks[Block{ev.Hash, ev.Tier}] = true
		case Removed:
			delete(m.blocks, Block{ev.Hash, ev.Tier})
		case Cleared:
			for b := range m.blocks {
				if b.Tier == ev.Tier {
					delete(m.blocks, b)
				}
			}
		}
	}
}

func (m *mapSink) sorted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for b := range m.blocks {
		out = append(out, b.Hash.Short()+"/"+b.Tier.String())
	}
	sort.Strings(out)
	return out
}

func snapSorted(s Snapshot) []string {
	var out []string
	for _, b := range s.Blocks {
		out = append(out, b.Hash.Short()+"/"+b.Tier.String())
	}
	sort.Strings(out)
	return out
}

func h(i int) prefix.Hash { return prefix.Chain(prefix.Root(nil, ""), []int32{int32(i)}, nil) }

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// waitConverged waits until the sink holds exactly the publisher's set.
func waitConverged(t *testing.T, p *Publisher, s *mapSink, sub *Subscriber) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		want := snapSorted(p.Snapshot())
		if equal(s.sorted(), want) && sub.Stats().Seq == p.Seq() && sub.Stats().Epoch == p.Epoch() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not converged: sink %d blocks, publisher %d; stats %+v (pub seq %d)", len(s.sorted()), len(p.Snapshot().Blocks), sub.Stats(), p.Seq())
}

func startSub(t *testing.T, url string, sink Sink) *Subscriber {
	t.Helper()
	sub, err := NewSubscriber(SubscriberConfig{URL: url, Sink: sink, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, IdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sub
}

// churn publishes stores, removals across tiers, and a clear.
func churn(p *Publisher, from, n int) {
	for i := from; i < from+n; i++ {
		p.Publish(Event{Kind: Stored, Tier: kvtier.Device, Hash: h(i), Parent: h(i - 1)})
		if i%3 == 0 {
			p.Publish(Event{Kind: Stored, Tier: kvtier.Host, Hash: h(i)})
		}
		if i%5 == 0 {
			p.Publish(Event{Kind: Removed, Tier: kvtier.Device, Hash: h(i - 2)})
		}
	}
}

func TestPublisherSnapshotAndRing(t *testing.T) {
	p := mustPublisher(t, Config{RingSize: 4, Epoch: 7})
	p.SetIdentity("abcd", 16)
	p.Publish(Event{Kind: Stored, Tier: kvtier.Device, Hash: h(1)}, Event{Kind: Stored, Tier: kvtier.Host, Hash: h(1)}, Event{Kind: Stored, Tier: kvtier.Device, Hash: h(2)})
	p.Publish(Event{Kind: Removed, Tier: kvtier.Device, Hash: h(1)})
	s := p.Snapshot()
	if s.Seq != 4 || s.Epoch != 7 || s.Identity != "abcd" || s.BlockSize != 16 {
		t.Fatalf("snapshot header %+v", s)
	}
	if got, want := snapSorted(s), []string{h(1).Short() + "/host", h(2).Short() + "/device"}; !equal(got, want) {
		sort.Strings(want)
		if !equal(got, want) {
			t.Fatalf("blocks: have %v want %v", got, want)
		}
	}
	p.Publish(Event{Kind: Cleared, Tier: kvtier.Host})
	if got := len(p.Snapshot().Blocks); got != 1 {
		t.Fatalf("after clear host: have %d blocks want 1", got)
	}
	evs, latest, ok, _ := p.readFrom(nil, 1, 10)
	if !ok || latest != 5 || len(evs) != 4 || evs[0].Seq != 2 {
		t.Fatalf("readFrom(1): ok=%v latest=%d evs=%d", ok, latest, len(evs))
	}
	if _, _, ok, _ := p.readFrom(nil, 0, 10); ok {
		t.Fatal("readFrom(0) with ring 4 and seq 5: want resync")
	}
	if _, _, ok, _ := p.readFrom(nil, 9, 10); ok {
		t.Fatal("readFrom(9) ahead of seq 5: want resync")
	}
}

func TestSubscriberConverges(t *testing.T) {
	p := mustPublisher(t, Config{RingSize: 1024, Heartbeat: 50 * time.Millisecond})
	churn(p, 0, 50) // before the subscriber: comes from the snapshot
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	sink := &mapSink{}
	sub := startSub(t, srv.URL, sink)
	churn(p, 50, 200)
	waitConverged(t, p, sink, sub)
	if st := sub.Stats(); st.Resyncs != 1 || st.Gaps != 0 {
		t.Fatalf("stats %+v: want 1 resync (the initial snapshot), no gaps", st)
	}
}

// dropWriter drops the stream line of one sequence number once.
type dropWriter struct {
	http.ResponseWriter
	drop *atomic.Uint64
}

func (d dropWriter) Write(b []byte) (int, error) {
	n := len(b)
	if seq := d.drop.Load(); seq != 0 {
		needle := []byte(fmt.Sprintf(`"type":"event","seq":%d,`, seq))
		for {
			i := bytes.Index(b, needle)
			if i < 0 {
				break
			}
			start := bytes.LastIndexByte(b[:i], '\n') + 1
			end := i + bytes.IndexByte(b[i:], '\n') + 1
			b = append(append([]byte{}, b[:start]...), b[end:]...)
			d.drop.Store(0)
		}
	}
	_, err := d.ResponseWriter.Write(b)
	return n, err
}

func (d dropWriter) Flush() { d.ResponseWriter.(http.Flusher).Flush() }

func TestSubscriberGapResync(t *testing.T) {
	for _, tail := range []bool{false, true} {
		t.Run(fmt.Sprintf("tail=%v", tail), func(t *testing.T) {
			p := mustPublisher(t, Config{RingSize: 1024, Heartbeat: 50 * time.Millisecond})
			var drop atomic.Uint64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.Handler().ServeHTTP(dropWriter{w, &drop}, r)
			}))
			t.Cleanup(srv.Close)
			sink := &mapSink{}
			sub := startSub(t, srv.URL, sink)
			churn(p, 0, 20)
			waitConverged(t, p, sink, sub)
			// Drop the next event. tail: it is the last one, so only the
			// heartbeat can reveal the gap.
			drop.Store(p.Seq() + 1)
			if tail {
				p.Publish(Event{Kind: Stored, Tier: kvtier.Device, Hash: h(999)})
			} else {
				churn(p, 20, 30)
			}
			waitConverged(t, p, sink, sub)
			if st := sub.Stats(); st.Gaps != 1 || st.Resyncs != 2 {
				t.Fatalf("stats %+v: want 1 gap and 2 resyncs", st)
			}
		})
	}
}

func TestSubscriberRestartAndRingOverflow(t *testing.T) {
	var cur atomic.Pointer[Publisher]
	cur.Store(mustPublisher(t, Config{RingSize: 64, Heartbeat: 50 * time.Millisecond}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur.Load().Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	sink := &mapSink{}
	sub := startSub(t, srv.URL, sink)
	churn(cur.Load(), 0, 20)
	waitConverged(t, cur.Load(), sink, sub)

	// Restart: a new process (new epoch) with a different block set.
	p2 := mustPublisher(t, Config{RingSize: 64, Heartbeat: 50 * time.Millisecond})
	churn(p2, 500, 10)
	cur.Store(p2)
	srv.CloseClientConnections()
	waitConverged(t, p2, sink, sub)
	if st := sub.Stats(); st.Restarts != 1 {
		t.Fatalf("stats %+v: want 1 restart", st)
	}

	// Ring overflow while disconnected: reconnect finds since+1 gone.
	before := sub.Stats().Resyncs
	srv.Config.SetKeepAlivesEnabled(false)
	srv.CloseClientConnections()
	churn(p2, 600, 200) // > 64 events at once
	waitConverged(t, p2, sink, sub)
	if st := sub.Stats(); st.Resyncs <= before {
		t.Logf("stats %+v (the subscriber may have kept up; no resync needed)", st)
	}
}

func TestSubscriberUnsupported(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	sub := startSub(t, srv.URL, &mapSink{})
	deadline := time.Now().Add(3 * time.Minute)
	for !sub.Stats().Unsupported {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: want Unsupported", sub.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func BenchmarkPublish(b *testing.B) {
	p := mustPublisher(b, DefaultConfig())
	evs := make([]prefix.Event, 8)
	for i := range evs {
		evs[i] = prefix.Event{Kind: prefix.Stored, Hash: h(i % 4096)}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 1 {
			for j := range evs {
				evs[j].Kind = prefix.Evicted
			}
		} else {
			for j := range evs {
				evs[j].Kind = prefix.Stored
			}
		}
		p.PublishPrefix(kvtier.Device, evs)
	}
}

func mustPublisher(t testing.TB, cfg Config) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Zero values take the defaults; negative ones are errors, never silently replaced.
func TestPublisherConfigValidate(t *testing.T) {
	c, err := Config{}.validate()
	if err != nil || c.RingSize != DefaultConfig().RingSize || c.Heartbeat != DefaultConfig().Heartbeat || c.Epoch == 0 {
		t.Fatalf("zero Config: %+v, %v; want the defaults and a nonzero epoch", c, err)
	}
	for _, bad := range []Config{{RingSize: -1}, {Heartbeat: -time.Second}} {
		if _, err := NewPublisher(bad); err == nil {
			t.Fatalf("NewPublisher(%+v) accepted a negative value", bad)
		}
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	sink := &mapSink{}
	c, err := SubscriberConfig{URL: "http://127.0.0.1:1", Sink: sink}.validate()
	if err != nil || c.MinBackoff != 100*time.Millisecond || c.MaxBackoff != 5*time.Second || c.IdleTimeout != 5*time.Second {
		t.Fatalf("zero durations: %+v, %v; want the defaults", c, err)
	}
	if c, err := (SubscriberConfig{URL: "x", Sink: sink, MinBackoff: 10 * time.Second}).validate(); err != nil || c.MaxBackoff != 10*time.Second {
		t.Fatalf("MinBackoff above the default MaxBackoff: MaxBackoff %v, %v; want 10s", c.MaxBackoff, err)
	}
	for _, bad := range []SubscriberConfig{
		{MinBackoff: -1}, {IdleTimeout: -time.Second}, {UnsupportedRetry: -1},
		{MinBackoff: time.Second, MaxBackoff: time.Millisecond},
	} {
		bad.URL, bad.Sink = "http://127.0.0.1:1", sink
		if _, err := NewSubscriber(bad); err == nil {
			t.Errorf("NewSubscriber accepted %+v", bad)
		}
	}
}

// TestSubscriberIdleReconnects: a stream that stays open but sends nothing (no event, no
// heartbeat) for IdleTimeout is given up and opened again; the subscriber stays in sync. The
// stalled stream is held until the test ends, so only the idle timeout can end it (a slow
// machine only makes it take longer).
func TestSubscriberIdleReconnects(t *testing.T) {
	p := mustPublisher(t, Config{Heartbeat: time.Hour}) // no heartbeat within the test
	churn(p, 0, 20)
	release := make(chan struct{})
	var streams atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/snapshot") && streams.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select { // the first stream: open, silent
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		p.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	sink := &mapSink{}
	sub, err := NewSubscriber(SubscriberConfig{URL: srv.URL, Sink: sink, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, IdleTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(3 * time.Minute); sub.Stats().Reconnects == 0 || streams.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v after %d streams: the silent stream was never given up", sub.Stats(), streams.Load())
		}
	}
	churn(p, 20, 10) // events after the reconnect come on the new stream
	waitConverged(t, p, sink, sub)
}
