package kvevents

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// Kind says what happened to a block.
type Kind uint8

const (
	// Stored: the tier now holds the block.
	Stored Kind = iota + 1
	// Removed: the tier no longer holds the block (evicted or invalidated).
	Removed
	// Cleared: the tier dropped every block. Hash and Parent are zero.
	Cleared
)

var kindNames = [...]string{Stored: "stored", Removed: "removed", Cleared: "cleared"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if n != "" && n == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("kvevents: unknown kind %q", s)
}

// parseTier decodes a wire tier name (kvtier.Parse, with this package's error prefix).
func parseTier(s string) (kvtier.Tier, error) {
	t, err := kvtier.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("kvevents: %w", err)
	}
	return t, nil
}

// Event is one change to a replica's block set. Seq is set by the Publisher.
type Event struct {
	Seq    uint64
	Kind   Kind
	Tier   kvtier.Tier
	Hash   prefix.Hash
	Parent prefix.Hash
	Time   time.Time // when it was published; Publish fills a zero Time
}

// Block is one (hash, tier) pair of a snapshot.
type Block struct {
	Hash prefix.Hash
	Tier kvtier.Tier
}

// Snapshot is a replica's whole block set after event Seq of epoch Epoch.
type Snapshot struct {
	Epoch     uint64
	Seq       uint64
	Identity  string // hex of the identity bytes the replica passes to prefix.Root
	BlockSize int
	// ReuseBlocks is the replica's reuse unit in blocks: it reuses a cached prefix only in
	// whole runs of this many blocks from the root (a hybrid model resumes only at a state
	// checkpoint, one every ReuseBlocks blocks). 0, from a replica that predates the field,
	// means 1: every block.
	ReuseBlocks int
	Blocks      []Block // no order; one entry per (hash, tier)
	Costs       *Costs  // the replica's cost figures; nil: none published
}

// MaxReuseBlocks bounds a published reuse unit (the engine's own bound on its state
// checkpoint interval); a larger one, or a negative one, is garbage.
const MaxReuseBlocks = 1 << 20

// Unit returns the reuse unit in blocks, at least 1.
func (s *Snapshot) Unit() int { return max(1, s.ReuseBlocks) }

func checkReuseBlocks(n int) error {
	if n < 0 || n > MaxReuseBlocks {
		return fmt.Errorf("kvevents: reuse_blocks %d out of range [0, %d]", n, MaxReuseBlocks)
	}
	return nil
}

// IdentityBytes decodes Identity; nil when none was set.
func (s *Snapshot) IdentityBytes() ([]byte, error) {
	if s.Identity == "" {
		return nil, nil
	}
	return hex.DecodeString(s.Identity)
}

// FromPrefix converts the prefix cache's events of one tier, appending to
// dst: Stored stays stored, Evicted and Removed become removed, Cleared
// stays cleared. Tokens are dropped (subscribers recompute hashes instead).
func FromPrefix(dst []Event, tier kvtier.Tier, evs []prefix.Event) []Event {
	for i := range evs {
		var k Kind
		switch evs[i].Kind {
		case prefix.Stored:
			k = Stored
		case prefix.Evicted, prefix.Removed:
			k = Removed
		case prefix.Cleared:
			k = Cleared
		default:
			continue
		}
		dst = append(dst, Event{Kind: k, Tier: tier, Hash: evs[i].Hash, Parent: evs[i].Parent})
	}
	return dst
}

// wireMsg is one line of the stream (and the decoder's target).
type wireMsg struct {
	Type      string `json:"type"`
	Epoch     string `json:"epoch,omitempty"`
	Seq       uint64 `json:"seq"`
	Kind      string `json:"kind,omitempty"`
	Tier      string `json:"tier,omitempty"`
	Hash      string `json:"hash,omitempty"`
	Parent    string `json:"parent,omitempty"`
	Time      int64  `json:"time,omitempty"`
	Identity  string `json:"identity,omitempty"`
	BlockSize int    `json:"block_size,omitempty"`
	// ReuseBlocks (hello): the replica's reuse unit in blocks (Snapshot.ReuseBlocks).
	ReuseBlocks int        `json:"reuse_blocks,omitempty"`
	Costs       *wireCosts `json:"costs,omitempty"`
	Load        *wireLoad  `json:"load,omitempty"` // a "load" line's (load.go)
}

type wireBlock struct {
	Hash string `json:"hash"`
	Tier string `json:"tier"`
}

type wireSnapshot struct {
	Epoch       string      `json:"epoch"`
	Seq         uint64      `json:"seq"`
	Identity    string      `json:"identity"`
	BlockSize   int         `json:"block_size"`
	ReuseBlocks int         `json:"reuse_blocks,omitempty"`
	Blocks      []wireBlock `json:"blocks"`
	Costs       *wireCosts  `json:"costs,omitempty"`
}

func epochString(e uint64) string { return strconv.FormatUint(e, 16) }

func parseEpoch(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

func parseHash(s string) (prefix.Hash, error) {
	var h prefix.Hash
	if s == "" {
		return h, nil
	}
	if len(s) != 64 {
		return h, fmt.Errorf("kvevents: hash %q: want 64 hex digits", s)
	}
	_, err := hex.Decode(h[:], []byte(s))
	return h, err
}

// appendEventJSON appends ev as one stream line (with the newline). Hand
// written: it runs once per event per subscriber.
func appendEventJSON(b []byte, ev *Event) []byte {
	b = append(b, `{"type":"event","seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"kind":"`...)
	b = append(b, ev.Kind.String()...)
	b = append(b, `","tier":"`...)
	b = append(b, ev.Tier.String()...)
	if ev.Kind != Cleared {
		b = append(b, `","hash":"`...)
		b = hex.AppendEncode(b, ev.Hash[:])
		b = append(b, `","parent":"`...)
		b = hex.AppendEncode(b, ev.Parent[:])
	}
	b = append(b, `","time":`...)
	b = strconv.AppendInt(b, ev.Time.UnixNano(), 10)
	b = append(b, "}\n"...)
	return b
}

// decodeEvent turns an event line into an Event.
func decodeEvent(m *wireMsg) (Event, error) {
	k, err := ParseKind(m.Kind)
	if err != nil {
		return Event{}, err
	}
	t, err := parseTier(m.Tier)
	if err != nil {
		return Event{}, err
	}
	h, err := parseHash(m.Hash)
	if err != nil {
		return Event{}, err
	}
	p, err := parseHash(m.Parent)
	if err != nil {
		return Event{}, err
	}
	return Event{Seq: m.Seq, Kind: k, Tier: t, Hash: h, Parent: p, Time: time.Unix(0, m.Time)}, nil
}
