package vllmevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Binds reports whether an endpoint is bound rather than connected, by vLLM's rule: bind when
// it has a wildcard ("*", "::" or "0.0.0.0") or is ipc:// or inproc://; else connect (a
// central consumer binds and replicas connect to it: llm-d's centralized mode).
func Binds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") || strings.Contains(endpoint, "0.0.0.0") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// EndSeq is the replay's end marker: -1 as 8 big-endian bytes.
var EndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Endpoint string // PUB: bound or connected by Binds
	// Replay, when set, is bound as a ROUTER that answers a DEALER's ["", start_seq] with
	// ["", seq, payload] for every buffered batch from start_seq on, then ["", -1, ""].
	Replay string
	Topic  string
	// Buffer is how many batches the replay keeps (default 10000, as vLLM's buffer_steps).
	Buffer int
	// Queue bounds batches waiting to be sent (default 4096); past it Publish drops and counts.
	Queue  int
	Logger *slog.Logger
	// DPRank is the data_parallel_rank of every batch (vLLM sends its attention DP rank).
	DPRank int64
}

// Publisher sends event batches on a ZeroMQ PUB socket in vLLM's wire format:
// [topic, 8-byte big-endian sequence number, msgpack EventBatch], sequence numbers from 0 up by
// one per batch, as vLLM's ZmqEventPublisher. Publish never blocks (it is called on the
// engine's runner goroutine): it queues, and a goroutine encodes and sends.
type Publisher struct {
	cfg     PublisherConfig
	pub     zmq4.Socket
	replay  zmq4.Socket
	queue   chan Batch
	dropped atomic.Uint64
	sent    atomic.Uint64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      struct {
		sync.Mutex
		ring []ringEntry // the last cfg.Buffer batches, oldest first
	}
}

type ringEntry struct {
	seq     uint64
	payload []byte
}

// NewPublisher opens the sockets and starts sending.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("vllmevents: no endpoint")
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10000
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, queue: make(chan Batch, cfg.Queue), cancel: cancel}
	// A connecting PUB redials a consumer that is not up yet or went away.
	p.pub = zmq4.NewPub(ctx, zmq4.WithDialerRetry(250*time.Millisecond), zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
	if Binds(cfg.Endpoint) {
		if err := p.pub.Listen(cfg.Endpoint); err != nil {
			cancel()
			p.pub.Close()
			return nil, fmt.Errorf("vllmevents: %s: %w", cfg.Endpoint, err)
		}
	} else {
		// Dialing retries until the consumer is up (batches sent before are dropped, as a
		// ZeroMQ PUB drops with no subscriber): serve does not wait on its router.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.pub.Dial(cfg.Endpoint); err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("vllmevents: cannot connect", "endpoint", cfg.Endpoint, "err", err)
			}
		}()
	}
	if cfg.Replay != "" {
		p.replay = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("stockpot-replay")))
		if err := p.replay.Listen(cfg.Replay); err != nil {
			cancel()
			p.pub.Close()
			p.replay.Close()
			return nil, fmt.Errorf("vllmevents: replay %s: %w", cfg.Replay, err)
		}
		p.wg.Add(1)
		go p.serveReplay()
	}
	p.wg.Add(1)
	go p.run(ctx)
	return p, nil
}

// Publish queues one batch of events (nothing for none); when the queue is full the batch is
// dropped and counted (Dropped): a consumer sees the gap in the sequence numbers.
func (p *Publisher) Publish(evs []Event) {
	if len(evs) == 0 {
		return
	}
	b := Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs, HasDPRank: true, DPRank: p.cfg.DPRank}
	select {
	case p.queue <- b:
	default:
		p.dropped.Add(1)
	}
}

// Dropped is how many batches Publish dropped on a full queue; Sent how many went out.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Sent is how many batches were sent.
func (p *Publisher) Sent() uint64 { return p.sent.Load() }

func (p *Publisher) run(ctx context.Context) {
	defer p.wg.Done()
	topic := []byte(p.cfg.Topic)
	var seq uint64
	var buf []byte
	for {
		var b Batch
		select {
		case <-ctx.Done():
			return
		case b = <-p.queue:
		}
		var err error
		buf, err = AppendBatch(buf[:0], &b)
		if err != nil {
			p.cfg.Logger.Warn("vllmevents: batch not encoded", "err", err)
			continue
		}
		payload := append([]byte(nil), buf...)
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seq)
		p.mu.Lock()
		if len(p.mu.ring) >= p.cfg.Buffer {
			p.mu.ring = append(p.mu.ring[:0], p.mu.ring[1:]...)
		}
		p.mu.ring = append(p.mu.ring, ringEntry{seq, payload})
		p.mu.Unlock()
		seq++
		if err := p.pub.Send(zmq4.NewMsgFrom(topic, sb[:], payload)); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Debug("vllmevents: send", "err", err) // no subscriber yet: PUB drops, as in ZeroMQ
		}
		p.sent.Add(1)
	}
}

// serveReplay answers replay requests as vLLM's publisher does.
func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			return // closed
		}
		// A ROUTER sees [identity, "", start_seq].
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			p.cfg.Logger.Warn("vllmevents: invalid replay request", "frames", len(msg.Frames))
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		var out []ringEntry
		for _, e := range p.mu.ring {
			if e.seq >= start {
				out = append(out, e)
			}
		}
		p.mu.Unlock()
		for _, e := range out {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], e.seq)
			if err := p.replay.Send(zmq4.NewMsgFrom(id, nil, sb[:], e.payload)); err != nil {
				break
			}
		}
		_ = p.replay.Send(zmq4.NewMsgFrom(id, nil, EndSeq, nil))
	}
}

// Close stops sending (queued batches not yet sent are dropped) and closes the sockets.
func (p *Publisher) Close() {
	p.cancel()
	p.pub.Close()
	if p.replay != nil {
		p.replay.Close()
	}
	p.wg.Wait()
}
