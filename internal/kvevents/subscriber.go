package kvevents

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sink receives one replica's block set from a Subscriber. Calls come from
// the Subscriber's goroutine, one at a time.
type Sink interface {
	// Reset replaces everything known about the replica with s.
	Reset(s Snapshot)
	// Apply applies events that follow the last Reset or Apply without a
	// gap. evs is only valid during the call.
	Apply(evs []Event)
}

// ErrUnsupported means the replica serves no event stream (404): the router
// falls back to prefix affinity for it.
var ErrUnsupported = errors.New("kvevents: replica serves no /v1/kv-events")

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// URL is the replica's base URL (http://host:port).
	URL string
	// Sink receives the block set. Required.
	Sink Sink
	// Client is used for both requests; default: a client without timeout
	// (the stream is long-lived).
	Client *http.Client
	// MinBackoff and MaxBackoff bound the reconnect delay, which doubles per
	// failed attempt with ±25% jitter (so many routers do not reconnect in
	// step). Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// UnsupportedRetry is how long to wait after a 404 before asking again
	// (the replica may be upgraded). Default 30s.
	UnsupportedRetry time.Duration
	// IdleTimeout: no line (event or heartbeat) for this long means the
	// stream is dead; reconnect. Default 5s (heartbeats come every second).
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// validate fills zero values with the defaults and rejects bad ones (negative durations, a
// MaxBackoff below MinBackoff).
func (c SubscriberConfig) validate() (SubscriberConfig, error) {
	if c.Sink == nil {
		return c, errors.New("kvevents: SubscriberConfig.Sink is required")
	}
	if c.URL == "" {
		return c, errors.New("kvevents: SubscriberConfig.URL is required")
	}
	c.URL = strings.TrimRight(c.URL, "/")
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.MinBackoff < 0 || c.MaxBackoff < 0 || c.UnsupportedRetry < 0 || c.IdleTimeout < 0 {
		return c, fmt.Errorf("kvevents: SubscriberConfig durations must not be negative (MinBackoff %v, MaxBackoff %v, UnsupportedRetry %v, IdleTimeout %v)",
			c.MinBackoff, c.MaxBackoff, c.UnsupportedRetry, c.IdleTimeout)
	}
	if c.MaxBackoff != 0 && c.MaxBackoff < c.MinBackoff {
		return c, fmt.Errorf("kvevents: SubscriberConfig.MaxBackoff %v is below MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(5*time.Second, c.MinBackoff)
	}
	if c.UnsupportedRetry == 0 {
		c.UnsupportedRetry = 30 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// SubscriberStats is what a Subscriber has seen, for /backends and metrics.
type SubscriberStats struct {
	Connected   bool      // a stream is open and in sync
	Unsupported bool      // the replica answered 404
	Synced      bool      // the Sink holds a snapshot plus an unbroken run of events
	Epoch       uint64    // the replica's epoch
	Seq         uint64    // last sequence number applied
	Events      uint64    // events applied
	Resyncs     uint64    // snapshots loaded (the first one included)
	Gaps        uint64    // sequence gaps detected (each caused a resync)
	Restarts    uint64    // epoch changes seen (each caused a resync)
	Reconnects  uint64    // streams opened after the first
	Garbage     uint64    // streams or snapshots dropped for bytes that do not parse (each dropped the Sink's state)
	LastEvent   time.Time // when the last line (event or heartbeat) arrived
	Lag         time.Duration
	LastError   string
}

// Subscriber follows one replica's event stream into a Sink.
type Subscriber struct {
	cfg SubscriberConfig

	mu struct {
		sync.Mutex
		st SubscriberStats
	}
}

// NewSubscriber returns a Subscriber; call Run to start it.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Subscriber{cfg: c}, nil
}

// Stats returns a copy of the counters.
func (s *Subscriber) Stats() SubscriberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.st
}

func (s *Subscriber) update(f func(st *SubscriberStats)) {
	s.mu.Lock()
	f(&s.mu.st)
	s.mu.Unlock()
}

// errResync asks Run to load a snapshot before streaming again.
var errResync = errors.New("kvevents: resync needed")

// errGarbage marks bytes from the replica that do not parse (a line, an event, a snapshot):
// the replica is isolated. Its Sink is emptied, and only a clean snapshot fills it again.
var errGarbage = errors.New("kvevents: garbage from replica")

func garbage(err error) error { return fmt.Errorf("%w: %w", errGarbage, err) }

// Run follows the stream until ctx is done. It returns ctx.Err().
func (s *Subscriber) Run(ctx context.Context) error {
	backoff := s.cfg.MinBackoff
	p := newProtocol()
	first := true
	for ctx.Err() == nil {
		var err error
		if p.needSnapshot {
			var snap Snapshot
			snap, err = s.fetchSnapshot(ctx)
			if err == nil {
				if p.snapshot(snap.Epoch, snap.Seq) {
					s.update(func(st *SubscriberStats) { st.Restarts++ })
				}
				s.cfg.Sink.Reset(snap)
				s.update(func(st *SubscriberStats) {
					st.Resyncs++
					st.Synced, st.Unsupported, st.Epoch, st.Seq = true, false, p.epoch, p.seq
				})
			}
		}
		if err == nil {
			if !first {
				s.update(func(st *SubscriberStats) { st.Reconnects++ })
			}
			first = false
			var progressed bool
			progressed, err = s.stream(ctx, &p)
			if progressed {
				backoff = s.cfg.MinBackoff
			}
			if errors.Is(err, errResync) {
				backoff = s.cfg.MinBackoff
				continue
			}
		}
		if ctx.Err() != nil {
			break
		}
		wait := backoff
		if errors.Is(err, errGarbage) {
			// Nothing the replica said is trusted until a snapshot parses: routers score it
			// with an empty index meanwhile.
			s.cfg.Sink.Reset(Snapshot{})
			p.needSnapshot = true
			s.update(func(st *SubscriberStats) { st.Garbage++; st.Synced = false })
		}
		if errors.Is(err, ErrUnsupported) {
			wait = s.cfg.UnsupportedRetry
			s.cfg.Sink.Reset(Snapshot{})
			p.unsupported()
			s.update(func(st *SubscriberStats) { st.Unsupported, st.Synced = true, false })
		}
		s.update(func(st *SubscriberStats) {
			st.Connected = false
			if err != nil {
				st.LastError = err.Error()
			}
		})
		s.cfg.Logger.Debug("kvevents: stream ended", "url", s.cfg.URL, "err", err, "retry_in", wait)
		// ±25% jitter.
		wait = wait*3/4 + time.Duration(rand.Int64N(int64(wait)/2+1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(backoff*2, s.cfg.MaxBackoff)
	}
	s.update(func(st *SubscriberStats) { st.Connected = false })
	return ctx.Err()
}

func (s *Subscriber) fetchSnapshot(ctx context.Context) (Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL+"/v1/kv-events/snapshot", nil)
	if err != nil {
		return Snapshot{}, err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Snapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return Snapshot{}, ErrUnsupported
	}
	if resp.StatusCode != http.StatusOK {
		return Snapshot{}, fmt.Errorf("kvevents: snapshot: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSnapshotBytes+1))
	if err != nil {
		return Snapshot{}, fmt.Errorf("kvevents: snapshot: %w", err)
	}
	if len(body) > maxSnapshotBytes {
		return Snapshot{}, garbage(fmt.Errorf("snapshot over %d bytes", maxSnapshotBytes))
	}
	snap, err := decodeSnapshot(body)
	if err != nil {
		return Snapshot{}, garbage(err)
	}
	return snap, nil
}

// maxSnapshotBytes bounds a snapshot: 1 GiB, about 8 million (hash, tier) pairs.
const maxSnapshotBytes = 1 << 30

// decodeSnapshot parses GET /v1/kv-events/snapshot's body.
func decodeSnapshot(body []byte) (Snapshot, error) {
	var ws wireSnapshot
	if err := json.Unmarshal(body, &ws); err != nil {
		return Snapshot{}, fmt.Errorf("kvevents: snapshot: %w", err)
	}
	snap := Snapshot{Seq: ws.Seq, Identity: ws.Identity, BlockSize: ws.BlockSize, ReuseBlocks: ws.ReuseBlocks,
		Blocks: make([]Block, 0, len(ws.Blocks))}
	var err error
	if snap.Epoch, err = parseEpoch(ws.Epoch); err != nil {
		return Snapshot{}, fmt.Errorf("kvevents: snapshot epoch %q: %w", ws.Epoch, err)
	}
	if ws.BlockSize < 0 {
		return Snapshot{}, fmt.Errorf("kvevents: snapshot block_size %d", ws.BlockSize)
	}
	if err := checkReuseBlocks(ws.ReuseBlocks); err != nil {
		return Snapshot{}, err
	}
	for _, b := range ws.Blocks {
		h, err := parseHash(b.Hash)
		if err != nil {
			return Snapshot{}, err
		}
		t, err := parseTier(b.Tier)
		if err != nil {
			return Snapshot{}, err
		}
		snap.Blocks = append(snap.Blocks, Block{Hash: h, Tier: t})
	}
	if ws.Costs != nil {
		c, err := decodeCosts(ws.Costs)
		if err != nil {
			return Snapshot{}, err
		}
		snap.Costs = &c
	}
	return snap, nil
}

// decodeLine parses one stream line: the message, and for an "event" line its Event, for a
// "costs" line its Costs; a "load" line's load is checked (decodeLoad(m.Load) reads it). Any
// other type is returned as it is (a newer publisher's; the
// Subscriber skips it).
func decodeLine(line []byte) (m wireMsg, ev Event, c Costs, err error) {
	if err = json.Unmarshal(line, &m); err != nil {
		return m, ev, c, fmt.Errorf("kvevents: bad line: %w", err)
	}
	switch m.Type {
	case "hello", "resync":
		if _, err = parseEpoch(m.Epoch); err != nil {
			return m, ev, c, fmt.Errorf("kvevents: %s epoch %q: %w", m.Type, m.Epoch, err)
		}
		err = checkReuseBlocks(m.ReuseBlocks)
	case "event":
		ev, err = decodeEvent(&m)
	case "costs":
		if m.Costs == nil {
			return m, ev, c, errors.New("kvevents: costs line without costs")
		}
		c, err = decodeCosts(m.Costs)
	case "load":
		_, err = decodeLoad(m.Load)
	}
	return m, ev, c, err
}

// stream reads events after p.seq until an error, checking each line with p. It reports
// whether any line arrived, and returns errResync when p needs a snapshot.
func (s *Subscriber) stream(ctx context.Context, p *protocol) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	u := s.cfg.URL + "/v1/kv-events?since=" + strconv.FormatUint(p.seq, 10) + "&epoch=" + epochString(p.epoch)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, ErrUnsupported
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("kvevents: stream: HTTP %d", resp.StatusCode)
	}
	// The watchdog closes the stream when no line came for IdleTimeout.
	alive := make(chan struct{}, 1)
	go func() {
		t := time.NewTimer(s.cfg.IdleTimeout)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-alive:
				t.Reset(s.cfg.IdleTimeout)
			case <-t.C:
				cancel()
				return
			}
		}
	}()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	progressed := false
	batch := make([]Event, 0, 64)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		s.cfg.Sink.Apply(batch)
		last := batch[len(batch)-1]
		n := uint64(len(batch))
		lag := time.Since(last.Time)
		s.update(func(st *SubscriberStats) {
			st.Seq, st.Events, st.LastEvent, st.Lag = last.Seq, st.Events+n, time.Now(), lag
		})
		batch = batch[:0]
	}
	// failed records a verdict that ends the stream.
	failed := func(v verdict) (bool, error) {
		s.update(func(st *SubscriberStats) {
			if v == gap {
				st.Gaps++
			}
			st.Synced = false
		})
		return progressed, errResync
	}
	for {
		line, rerr := br.ReadSlice('\n')
		if rerr == bufio.ErrBufferFull {
			flush()
			return progressed, garbage(fmt.Errorf("line over %d bytes", br.Size()))
		}
		if rerr != nil {
			flush()
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return progressed, rerr
		}
		select {
		case alive <- struct{}{}:
		default:
		}
		m, ev, costs, err := decodeLine(line)
		if err != nil {
			flush()
			return progressed, garbage(err)
		}
		switch m.Type {
		case "hello":
			progressed = true
			e, _ := parseEpoch(m.Epoch) // decodeLine checked it
			if v := p.hello(e); v != accept {
				return failed(v)
			}
			s.update(func(st *SubscriberStats) { st.Connected, st.LastEvent, st.LastError = true, time.Now(), "" })
		case "resync":
			flush()
			return failed(p.resyncAsked())
		case "heartbeat":
			flush()
			if v := p.heartbeat(m.Seq); v != accept {
				return failed(v)
			}
			s.update(func(st *SubscriberStats) { st.LastEvent, st.Lag = time.Now(), 0 })
		case "costs":
			flush()
			if cs, ok := s.cfg.Sink.(CostSink); ok {
				cs.Costs(costs)
			}
		case "load":
			if ls, ok := s.cfg.Sink.(LoadSink); ok {
				l, _ := decodeLoad(m.Load) // decodeLine checked it
				ls.Load(l)
			}
		case "event":
			if v := p.event(ev.Seq); v != accept {
				flush()
				return failed(v)
			}
			batch = append(batch, ev)
			if len(batch) == cap(batch) || br.Buffered() == 0 {
				flush()
			}
		}
	}
}
