package kvevents

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// unitSink records the reuse unit of each snapshot it is reset to.
type unitSink struct {
	mapSink
	mu    sync.Mutex
	units []int
}

func (u *unitSink) Reset(s Snapshot) {
	u.mu.Lock()
	u.units = append(u.units, s.ReuseBlocks)
	u.mu.Unlock()
	u.mapSink.Reset(s)
}

// TestReuseBlocks: a replica's reuse unit (SetReuseBlocks) travels in the hello line and the
// snapshot, reaches a Subscriber's Sink, and a snapshot or hello without it (an older
// replica) still parses, as unit 1. Out-of-range units are refused at both ends.
func TestReuseBlocks(t *testing.T) {
	p := mustPublisher(t, Config{RingSize: 64, Heartbeat: 50 * time.Millisecond})
	p.SetIdentity("abcd", 16)
	if err := p.SetReuseBlocks(-1); err == nil {
		t.Fatal("SetReuseBlocks(-1) accepted")
	}
	if err := p.SetReuseBlocks(MaxReuseBlocks + 1); err == nil {
		t.Fatal("SetReuseBlocks past MaxReuseBlocks accepted")
	}
	if s := p.Snapshot(); s.ReuseBlocks != 0 || s.Unit() != 1 {
		t.Fatalf("before SetReuseBlocks: %d (unit %d), want 0 (unit 1)", s.ReuseBlocks, s.Unit())
	}
	if err := p.SetReuseBlocks(4); err != nil {
		t.Fatal(err)
	}
	churn(p, 0, 10)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)

	// The hello line says it.
	resp, err := http.Get(srv.URL + "/v1/kv-events")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m, _, _, err := decodeLine(line); err != nil || m.Type != "hello" || m.ReuseBlocks != 4 {
		t.Fatalf("hello %q: %+v, %v", line, m, err)
	}
	// The snapshot says it, and the Sink gets it.
	var ws map[string]any
	resp, err = http.Get(srv.URL + "/v1/kv-events/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&ws)
	resp.Body.Close()
	if err != nil || ws["reuse_blocks"] != 4.0 {
		t.Fatalf("snapshot reuse_blocks %v, %v", ws["reuse_blocks"], err)
	}
	sink := &unitSink{}
	sub := startSub(t, srv.URL, sink)
	waitConverged(t, p, &sink.mapSink, sub)
	sink.mu.Lock()
	units := append([]int(nil), sink.units...)
	sink.mu.Unlock()
	if len(units) != 1 || units[0] != 4 {
		t.Fatalf("sink reset with units %v, want [4]", units)
	}

	// An older replica's bytes: no reuse_blocks anywhere.
	old := []byte(`{"epoch":"1f","seq":0,"identity":"ab","block_size":16,"blocks":[]}`)
	if s, err := decodeSnapshot(old); err != nil || s.ReuseBlocks != 0 || s.Unit() != 1 {
		t.Fatalf("old snapshot: %+v, %v", s, err)
	}
	if m, _, _, err := decodeLine([]byte(`{"type":"hello","epoch":"1f","seq":0,"identity":"ab","block_size":16}`)); err != nil || m.ReuseBlocks != 0 {
		t.Fatalf("old hello: %+v, %v", m, err)
	}
	// Garbage units.
	for _, bad := range []string{`-1`, `1048577`, `1.5`, `"4"`} {
		if _, err := decodeSnapshot([]byte(`{"epoch":"1f","seq":0,"block_size":16,"reuse_blocks":` + bad + `,"blocks":[]}`)); err == nil {
			t.Errorf("snapshot with reuse_blocks %s accepted", bad)
		}
		if _, _, _, err := decodeLine([]byte(`{"type":"hello","epoch":"1f","seq":0,"reuse_blocks":` + bad + `}`)); err == nil {
			t.Errorf("hello with reuse_blocks %s accepted", bad)
		}
	}
}
