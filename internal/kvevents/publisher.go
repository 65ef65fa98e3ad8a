package kvevents

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// A block's tiers are a uint8 bit set (bit t = kvtier.Tier t): this fails to compile past 8.
var _ [8 - kvtier.Count]struct{}

// Config configures a Publisher.
type Config struct {
	// RingSize is how many recent events are kept for subscribers that
	// reconnect with ?since. Default 16384: about 1.5 MiB, several seconds of
	// a busy replica's churn, enough to ride out a reconnect; a subscriber
	// further behind resyncs from the snapshot, which is always correct.
	RingSize int
	// Heartbeat is how often an idle stream sends the latest seq. Default 1s.
	Heartbeat time.Duration
	// Epoch, when nonzero, replaces the random epoch (tests).
	Epoch uint64
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// LoadInterval is how often a stream reads the replica's load (SetLoad) and sends a load
	// line if it changed. Default DefaultLoadInterval.
	LoadInterval time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{RingSize: 16384, Heartbeat: time.Second} }

// validate fills zero values with the defaults and rejects negative ones. c is a copy: the
// caller's struct is not changed.
func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.LoadInterval < 0 {
		return c, fmt.Errorf("kvevents: LoadInterval %v must not be negative", c.LoadInterval)
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = DefaultLoadInterval
	}
	if c.RingSize < 0 || c.Heartbeat < 0 {
		return c, fmt.Errorf("kvevents: RingSize %d and Heartbeat %v must not be negative", c.RingSize, c.Heartbeat)
	}
	if c.RingSize == 0 {
		c.RingSize = d.RingSize
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = d.Heartbeat
	}
	if c.Epoch == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.Epoch = binary.LittleEndian.Uint64(b[:]) | 1 // never zero
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Publisher numbers a replica's block events, keeps the recent ones and the
// current block set, and serves them (see Handler). Safe for concurrent use.
type Publisher struct {
	cfg Config

	mu struct {
		sync.Mutex
		identity    string
		blockSize   int
		reuseBlocks int // SetReuseBlocks; 0: not said (subscribers read 1)
		// seq is the last assigned sequence number (0: none yet).
		seq uint64
		// ring[i % len] holds event i for seq-len < i <= seq.
		ring []Event
		// blocks maps a hash to the set of tiers holding it (bit t = Tier t).
		blocks map[prefix.Hash]uint8
		// costs reads the replica's cost figures (SetCosts); nil: none.
		costs func() Costs
		// load reads the replica's load (SetLoad); nil: none.
		load LoadSource
		// wake is closed and replaced by Publish when a reader waits on it.
		wake    chan struct{}
		waiting bool
	}
}

// NewPublisher returns a Publisher with a fresh epoch, or an error for a bad Config.
func NewPublisher(cfg Config) (*Publisher, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: c}
	p.mu.ring = make([]Event, p.cfg.RingSize)
	p.mu.blocks = make(map[prefix.Hash]uint8)
	p.mu.wake = make(chan struct{})
	return p, nil
}

// Epoch returns the publisher's epoch.
func (p *Publisher) Epoch() uint64 { return p.cfg.Epoch }

// SetIdentity records what subscribers need to compute the replica's hash
// chain: the hex of the identity bytes passed to prefix.Root, and the block
// size in tokens.
func (p *Publisher) SetIdentity(identityHex string, blockSize int) {
	p.mu.Lock()
	p.mu.identity, p.mu.blockSize = identityHex, blockSize
	p.mu.Unlock()
}

// SetReuseBlocks records the replica's reuse unit in blocks (Snapshot.ReuseBlocks): a
// hybrid model's state checkpoint interval, 1 for any other. It goes in every hello line and
// snapshot after the call. n outside [0, MaxReuseBlocks] is an error.
func (p *Publisher) SetReuseBlocks(n int) error {
	if err := checkReuseBlocks(n); err != nil {
		return err
	}
	p.mu.Lock()
	p.mu.reuseBlocks = n
	p.mu.Unlock()
	return nil
}

// Publish numbers evs, records them and wakes streaming readers. It does no
// I/O and never waits on a reader. evs is not retained.
func (p *Publisher) Publish(evs ...Event) {
	if len(evs) == 0 {
		return
	}
	now := p.cfg.Now()
	p.mu.Lock()
	n := uint64(len(p.mu.ring))
	for i := range evs {
		ev := evs[i]
		p.mu.seq++
		ev.Seq = p.mu.seq
		if ev.Time.IsZero() {
			ev.Time = now
		}
		p.mu.ring[ev.Seq%n] = ev
		p.applyLocked(&ev)
	}
	if p.mu.waiting {
		close(p.mu.wake)
		p.mu.wake = make(chan struct{})
		p.mu.waiting = false
	}
	p.mu.Unlock()
}

// PublishPrefix publishes the prefix cache's events as happening in tier.
func (p *Publisher) PublishPrefix(tier kvtier.Tier, evs []prefix.Event) {
	var stack [64]Event
	p.Publish(FromPrefix(stack[:0], tier, evs)...)
}

// applyLocked updates the block set. REQUIRES: p.mu held.
func (p *Publisher) applyLocked(ev *Event) {
	bit := uint8(1) << ev.Tier
	switch ev.Kind {
	case Stored:
		p.mu.blocks[ev.Hash] |= bit
	case Removed:
		if m, ok := p.mu.blocks[ev.Hash]; ok {
			if m &^= bit; m == 0 {
				delete(p.mu.blocks, ev.Hash)
			} else {
				p.mu.blocks[ev.Hash] = m
			}
		}
	case Cleared:
		for h, m := range p.mu.blocks {
			if m &^= bit; m == 0 {
				delete(p.mu.blocks, h)
			} else {
				p.mu.blocks[h] = m
			}
		}
	}
}

// Snapshot returns the current block set and the seq it reflects, with the cost figures.
func (p *Publisher) Snapshot() Snapshot {
	var costs *Costs
	if c, ok := p.costs(); ok {
		costs = &c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{Epoch: p.cfg.Epoch, Seq: p.mu.seq, Identity: p.mu.identity, BlockSize: p.mu.blockSize,
		ReuseBlocks: p.mu.reuseBlocks, Costs: costs,
		Blocks: make([]Block, 0, len(p.mu.blocks))}
	for h, m := range p.mu.blocks {
		for t := range kvtier.Tier(kvtier.Count) {
			if m&(1<<t) != 0 {
				s.Blocks = append(s.Blocks, Block{Hash: h, Tier: t})
			}
		}
	}
	return s
}

// Seq returns the last assigned sequence number.
func (p *Publisher) Seq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.seq
}

// readFrom copies events with Seq > since into dst (at most max of them).
// It returns ok=false when the ring no longer holds since+1 or since is
// ahead of the publisher (the reader must resync), and a channel closed by
// the next Publish when there was nothing to read.
func (p *Publisher) readFrom(dst []Event, since uint64, max int) (out []Event, latest uint64, ok bool, wake <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.mu.seq
	n := uint64(len(p.mu.ring))
	if since > seq {
		return dst, seq, false, nil
	}
	if seq-since > n {
		return dst, seq, false, nil
	}
	if since == seq {
		p.mu.waiting = true
		return dst, seq, true, p.mu.wake
	}
	for s := since + 1; s <= seq && len(dst) < max; s++ {
		dst = append(dst, p.mu.ring[s%n])
	}
	return dst, seq, true, nil
}
