package dashboard

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"
)

// JSONEvent is an event of kind carrying v as JSON (an error object if v does not encode).
func JSONEvent(kind string, v any) Event {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return Event{Kind: kind, Data: b}
}

// Feed is a dashboard's ring of its most recent records of one kind (the server's finished
// requests, the router's decisions): each record is numbered in order, kept while it is
// among the last size, and published to the hub's browsers as an event of kind.
type Feed[T any] struct {
	hub  *Hub
	kind string
	size int
	mu   struct {
		sync.Mutex
		ring []T    // protected by mu; the newest last, at most size
		seq  uint64 // protected by mu
	}
}

// NewFeed returns a feed of at most size records that publishes on hub.
func NewFeed[T any](hub *Hub, kind string, size int) *Feed[T] {
	return &Feed[T]{hub: hub, kind: kind, size: max(size, 1)}
}

// Add numbers rec with the next sequence number (number writes it into the record), keeps it
// and publishes it. Records are published in their number's order: the page keeps only a
// record newer than the last it showed, and two callers ending together used to publish in
// either order (the later number first hid the other). Publishing never blocks and takes no
// lock of the feed's caller; with no browser connected nothing is encoded.
func (f *Feed[T]) Add(rec T, number func(*T, uint64)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.seq++
	number(&rec, f.mu.seq)
	if len(f.mu.ring) == f.size {
		copy(f.mu.ring, f.mu.ring[1:])
		f.mu.ring = f.mu.ring[:f.size-1]
	}
	f.mu.ring = append(f.mu.ring, rec)
	if f.hub.Stats().Clients > 0 {
		f.hub.Publish(JSONEvent(f.kind, rec))
	}
}

// Recent returns the records kept, the newest last.
func (f *Feed[T]) Recent() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mu.ring)
}

// Notes are sticky events: each is published at once, and the last of each (kind, slot) is
// kept, at most a fixed number of slots, for browsers that connect later. `stockpot demo`
// narrates its modes this way.
type Notes struct {
	hub   *Hub
	slots int
	mu    struct {
		sync.Mutex
		order uint64                // protected by mu
		last  map[string]stickyNote // protected by mu
	}
}

type stickyNote struct {
	ev    Event
	order uint64
}

// NewNotes returns notes of at most slots slots that publish on hub.
func NewNotes(hub *Hub, slots int) *Notes {
	n := &Notes{hub: hub, slots: slots}
	n.mu.last = map[string]stickyNote{}
	return n
}

// Note publishes v (JSON) as an event of kind and keeps it as slot's last; a new slot past
// the bound is published but not kept.
func (n *Notes) Note(kind, slot string, v any) {
	ev := JSONEvent(kind, v)
	n.mu.Lock()
	k := kind + "/" + slot
	if _, ok := n.mu.last[k]; ok || len(n.mu.last) < n.slots {
		n.mu.order++
		n.mu.last[k] = stickyNote{ev, n.mu.order}
	}
	n.mu.Unlock()
	n.hub.Publish(ev)
}

// Events returns the kept notes in the order they were noted.
func (n *Notes) Events() []Event {
	n.mu.Lock()
	ns := make([]stickyNote, 0, len(n.mu.last))
	for _, s := range n.mu.last {
		ns = append(ns, s)
	}
	n.mu.Unlock()
	slices.SortFunc(ns, func(a, b stickyNote) int { return cmp.Compare(a.order, b.order) })
	out := make([]Event, len(ns))
	for i, s := range ns {
		out[i] = s.ev
	}
	return out
}
