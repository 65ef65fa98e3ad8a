package dashboard

import (
	"encoding/json"
	"testing"
)

type rec struct {
	Seq uint64 `json:"seq"`
	V   int    `json:"v"`
}

// TestFeed: records are numbered in order and the feed keeps the last size of them.
func TestFeed(t *testing.T) {
	h := NewHub(DefaultConfig())
	defer h.Close()
	f := NewFeed[rec](h, "rec", 3)
	if got := f.Recent(); len(got) != 0 {
		t.Fatalf("new feed holds %v", got)
	}
	for v := range 5 {
		f.Add(rec{V: v}, func(r *rec, seq uint64) { r.Seq = seq })
	}
	got := f.Recent()
	if len(got) != 3 || got[0] != (rec{3, 2}) || got[2] != (rec{5, 4}) {
		t.Fatalf("recent %v, want seq 3..5 holding 2..4", got)
	}
	got[0].V = 99 // a copy: the feed is not changed through it
	if f.Recent()[0].V != 2 {
		t.Error("Recent shares the ring")
	}
}

// TestNotes: the last note of each slot is kept, in the order noted, within the slot bound.
func TestNotes(t *testing.T) {
	h := NewHub(DefaultConfig())
	defer h.Close()
	n := NewNotes(h, 2)
	n.Note("demo", "a", 1)
	n.Note("demo", "b", 2)
	n.Note("demo", "c", 3) // a third slot: published, not kept
	n.Note("demo", "a", 4) // a's last, now the most recent
	var vals []int
	for _, ev := range n.Events() {
		var v int
		if err := json.Unmarshal(ev.Data, &v); err != nil || ev.Kind != "demo" {
			t.Fatalf("event %+v: %v", ev, err)
		}
		vals = append(vals, v)
	}
	if len(vals) != 2 || vals[0] != 2 || vals[1] != 4 {
		t.Errorf("notes %v, want [2 4]", vals)
	}
}
