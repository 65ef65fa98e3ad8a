package router

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/vllmevents"
)

// vLLM-format KV events (Config.KVEventsListen, route --kv-events-listen): the router binds a
// ZeroMQ SUB that replicas publish to (llm-d's centralized mode): vLLM, SGLang, and serve with
// --kv-events-zmq. Each message is [topic, seq, EventBatch]; the topic names the backend
// (backendForTopic). A BlockStored carries each block's token ids, and the router places the
// blocks in its OWN chain for that backend (prefix.Chain from a root of vllmChainIdentity),
// never trusting an engine's hash recipe or seed: the engine's hashes are only keys of a
// per-backend table (engine hash → our hash and the tiers holding it), through which later
// events (a child's parent_block_hash, BlockRemoved) are mapped. A block whose parent the
// table does not hold cannot be placed: it is counted and skipped (as are its children).
//
// Nothing wrong enters an index: a batch that does not decode, a sequence gap, a publisher
// restart or a flood (a replica past KVEventsMaxRate events a second) may have lost a
// BlockRemoved, so the backend's index and table are emptied (a reset) and refill from the
// blocks stored after it. Each is counted by reason and logged once per backend.

// vllmChainIdentity is the identity (prefix.Root) of the chain the router rehashes vLLM-format
// blocks into. The router computes requests' hashes with it, so it is the router's own.
var vllmChainIdentity = []byte("stockpot-router/vllm-token-chain/v1")

// DefaultKVEventsMaxRate bounds one backend's vLLM-format events (blocks stored or removed,
// plus one a batch) per second, with a burst of as many. A replica prefilling 100K tokens a
// second in blocks of 16 stores about 6K blocks a second.
const DefaultKVEventsMaxRate = 100_000

type zmqEvents struct {
	r     *Router
	sub   zmq4.Socket
	guard *vllmevents.Guard // in front of a TCP SUB: frames over maxZMQFrame cut before zmq4 allocates them
	m     *zmqMetrics
	rate  float64

	mu     sync.Mutex
	feeds  map[*Backend]*vllmFeed
	logged map[string]bool // reason and backend logged once (bounded)
}

// zmqMetrics are the stockpot_router_kv_zmq_* series.
type zmqMetrics struct {
	messages *prometheus.CounterVec // backend
	events   *prometheus.CounterVec // backend, type
	rejected *prometheus.CounterVec // backend, reason
	resets   *prometheus.CounterVec // backend, reason
	unplaced *prometheus.CounterVec // backend
}

func newZMQMetrics(reg prometheus.Registerer) *zmqMetrics {
	m := &zmqMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_kv_zmq_messages_total",
			Help: "vLLM-format event batches applied, by backend."}, []string{"backend"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_kv_zmq_events_total",
			Help: "vLLM-format events applied, by backend and type (BlockStored, BlockRemoved, AllBlocksCleared)."}, []string{"backend", "type"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_kv_zmq_rejected_total",
			Help: "vLLM-format messages or events not applied, by backend (unknown when the topic names none) and reason (frames, topic, seq_frame, msgpack, unknown_type, medium, flood; and, for a connection the guard cut before any topic, frame_too_large and not_zmtp)."},
			[]string{"backend", "reason"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_kv_zmq_resets_total",
			Help: "Times a backend's index was emptied because vLLM-format events may have been lost, by reason (gap, restart, msgpack, flood, block_size)."},
			[]string{"backend", "reason"}),
		unplaced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_kv_zmq_unplaced_blocks_total",
			Help: "Stored blocks whose parent the router does not know (it cannot place them in its chain), by backend."}, []string{"backend"}),
	}
	if reg != nil {
		reg.MustRegister(m.messages, m.events, m.rejected, m.resets, m.unplaced)
	}
	return m
}

// newZMQEvents binds the SUB on endpoint and starts reading it.
func newZMQEvents(r *Router, endpoint string, rate float64) (*zmqEvents, error) {
	if rate <= 0 {
		rate = DefaultKVEventsMaxRate
	}
	z := &zmqEvents{r: r, m: newZMQMetrics(r.cfg.Registerer), rate: rate, feeds: map[*Backend]*vllmFeed{}, logged: map[string]bool{}}
	z.sub = zmq4.NewSub(r.ctx)
	if err := z.sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		z.sub.Close()
		return nil, err
	}
	// A TCP endpoint is reachable by whoever reaches the router's network: the SUB itself binds
	// loopback, and a Guard on the endpoint checks every frame's announced size before the
	// ZeroMQ library allocates it (it allocates whatever a header says).
	subAt := endpoint
	var public net.Listener
	if addr, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		addr = strings.Replace(addr, "*", "", 1)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			z.sub.Close()
			return nil, fmt.Errorf("router: --kv-events-listen %s: %w", endpoint, err)
		}
		public, subAt = ln, "tcp://127.0.0.1:0"
	}
	if err := z.sub.Listen(subAt); err != nil {
		z.sub.Close()
		if public != nil {
			public.Close()
		}
		return nil, fmt.Errorf("router: --kv-events-listen %s: %w", endpoint, err)
	}
	if public != nil {
		z.guard = vllmevents.NewGuard(public, z.sub.Addr().String(), maxZMQFrame)
		z.guard.Refused = func(err error) {
			reason := "not_zmtp"
			if errors.Is(err, vllmevents.ErrFrameTooLarge) {
				reason = "frame_too_large"
			}
			z.m.rejected.WithLabelValues("unknown", reason).Inc()
			z.once("unknown", reason, "err", err)
		}
	}
	r.wg.Add(1)
	go z.run()
	context.AfterFunc(r.ctx, func() {
		if z.guard != nil {
			z.guard.Close()
		}
		z.sub.Close()
	})
	return z, nil
}

// maxZMQFrame bounds one ZMTP frame a peer may send the SUB: a batch's payload at its bound
// (vllmevents.MaxPayloadBytes) with room for the topic and sequence frames.
const maxZMQFrame = vllmevents.MaxPayloadBytes + 64<<10

// KVEventsAddr is the address publishers reach the vLLM-format SUB at ("" without one).
func (r *Router) KVEventsAddr() string {
	switch {
	case r.zmq == nil:
		return ""
	case r.zmq.guard != nil:
		return r.zmq.guard.Addr().String()
	case r.zmq.sub.Addr() == nil:
		return ""
	}
	return r.zmq.sub.Addr().String()
}

func (z *zmqEvents) run() {
	defer z.r.wg.Done()
	for {
		msg, err := z.sub.Recv()
		if err != nil {
			if z.r.ctx.Err() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // a peer's broken connection: the socket goes on
			continue
		}
		z.handle(msg.Frames, time.Now())
	}
}

// attach makes b's index fed by the SUB (instead of its /v1/kv-events).
func (z *zmqEvents) attach(b *Backend) {
	f := &vllmFeed{b: b, max: b.index.limit()}
	f.resetLocked(0)
	b.events = f
	z.mu.Lock()
	z.feeds[b] = f
	z.mu.Unlock()
}

// once logs a warning the first time reason is seen for a backend.
func (z *zmqEvents) once(backend, reason string, args ...any) {
	z.mu.Lock()
	k := backend + "\x00" + reason
	first := !z.logged[k] && len(z.logged) < 4096
	if first {
		z.logged[k] = true
	}
	z.mu.Unlock()
	if first {
		z.r.cfg.Logger.Warn("router: vLLM-format kv events: "+reason+" (logged once; counted in stockpot_router_kv_zmq_rejected_total or _resets_total)",
			append([]any{"backend", backend}, args...)...)
	}
}

// backendForTopic finds the backend a topic names: llm-d's kv@<pod>@<model> where the pod is
// the backend's host:port, or host:port alone, or the backend's URL.
func (z *zmqEvents) backendForTopic(topic string) *Backend {
	pod := topic
	if parts := strings.Split(topic, "@"); len(parts) >= 2 && parts[0] == "kv" {
		pod = parts[1]
	}
	if u, err := url.Parse(pod); err == nil && u.Host != "" && strings.Contains(pod, "://") {
		pod = u.Host
	}
	if _, _, err := net.SplitHostPort(pod); err != nil {
		return nil
	}
	for _, b := range z.r.backends() {
		if b.URL.Host == pod {
			z.mu.Lock()
			f := z.feeds[b]
			z.mu.Unlock()
			if f != nil {
				return b
			}
		}
	}
	return nil
}

// handle applies one multipart message.
func (z *zmqEvents) handle(frames [][]byte, now time.Time) {
	if len(frames) == 0 {
		return
	}
	b := z.backendForTopic(string(frames[0]))
	if b == nil {
		z.m.rejected.WithLabelValues("unknown", "topic").Inc()
		z.once("unknown", "topic names no backend", "topic", fmt.Sprintf("%.100q", frames[0]))
		return
	}
	z.mu.Lock()
	f := z.feeds[b]
	z.mu.Unlock()
	id := b.ID
	if len(frames) != 3 {
		z.m.rejected.WithLabelValues(id, "frames").Inc()
		z.once(id, "message without 3 frames [topic, seq, payload]", "frames", len(frames))
		return
	}
	if len(frames[1]) != 8 {
		z.m.rejected.WithLabelValues(id, "seq_frame").Inc()
		z.once(id, "sequence frame not 8 bytes", "bytes", len(frames[1]))
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	batch, unknown, err := vllmevents.DecodeBatch(frames[2])
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		z.m.rejected.WithLabelValues(id, "msgpack").Inc()
		z.once(id, "batch does not decode", "err", err)
		z.reset(f, id, "msgpack")
		return
	}
	if unknown > 0 {
		z.m.rejected.WithLabelValues(id, "unknown_type").Add(float64(unknown))
		z.once(id, "unknown event type skipped")
	}
	cost := float64(1)
	for i := range batch.Events {
		cost += float64(len(batch.Events[i].BlockHashes))
	}
	if !f.take(cost, z.rate, now) {
		z.m.rejected.WithLabelValues(id, "flood").Inc()
		z.once(id, "replica past the event rate bound: batches dropped", "events_per_second", z.rate)
		if !f.flooded {
			f.flooded = true
			z.reset(f, id, "flood")
		}
		return
	}
	f.flooded = false
	rank := batch.DPRank
	if want, ok := f.seqs[rank]; ok && seq != want {
		reason := "gap"
		if seq < want {
			reason = "restart" // the publisher started over from 0
		}
		z.once(id, "sequence "+reason, "want", want, "got", seq)
		z.reset(f, id, reason)
	} else if !ok && len(f.seqs) >= 256 {
		z.m.rejected.WithLabelValues(id, "dp_rank").Inc()
		z.once(id, "too many data-parallel ranks")
		return
	}
	f.seqs[rank] = seq + 1
	f.st.Seq = seq
	z.apply(f, id, batch.Events)
	z.m.messages.WithLabelValues(id).Inc()
	f.st.LastEvent = now
}

// reset empties f's backend index and table. REQUIRES: f.mu.
func (z *zmqEvents) reset(f *vllmFeed, id, reason string) {
	z.m.resets.WithLabelValues(id, reason).Inc()
	switch reason {
	case "gap":
		f.st.Gaps++
	case "restart":
		f.st.Restarts++
	case "msgpack":
		f.st.Garbage++
	}
	f.resetLocked(f.blockSize)
}

// apply places evs in f's table and backend index. REQUIRES: f.mu.
func (z *zmqEvents) apply(f *vllmFeed, id string, evs []vllmevents.Event) {
	out := f.out[:0]
	for i := range evs {
		ev := &evs[i]
		z.m.events.WithLabelValues(id, ev.Type).Inc()
		f.st.Events++
		switch ev.Type {
		case vllmevents.TypeCleared:
			f.b.index.Apply(out)
			out = out[:0]
			f.resetLocked(f.blockSize)
			continue
		}
		tier, ok := vllmevents.TierOf(ev.Medium)
		if !ok {
			z.m.rejected.WithLabelValues(id, "medium").Inc()
			z.once(id, "unknown medium: event skipped", "medium", fmt.Sprintf("%.40q", ev.Medium))
			continue
		}
		bit := uint8(1) << tier
		switch ev.Type {
		case vllmevents.TypeStored:
			if ev.BlockSize != f.blockSize {
				if f.blockSize != 0 {
					z.once(id, "block size changed", "from", f.blockSize, "to", ev.BlockSize)
					f.b.index.Apply(out)
					out = out[:0]
					z.m.resets.WithLabelValues(id, "block_size").Inc()
				}
				f.resetLocked(ev.BlockSize)
			}
			var parent prefix.Hash
			if !ev.HasParent {
				parent = f.root(ev)
			} else if p, ok := f.table[ev.Parent]; ok {
				parent = p.ours
			} else {
				z.m.unplaced.WithLabelValues(id).Add(float64(len(ev.BlockHashes)))
				continue
			}
			bs := ev.BlockSize
			for j, h := range ev.BlockHashes {
				ours := prefix.Chain(parent, ev.TokenIDs[j*bs:(j+1)*bs], nil)
				e := f.table[h]
				e.ours, e.tiers = ours, e.tiers|bit
				f.table[h] = e
				out = append(out, kvevents.Event{Kind: kvevents.Stored, Tier: tier, Hash: ours, Parent: parent})
				parent = ours
			}
		case vllmevents.TypeRemoved:
			for _, h := range ev.BlockHashes {
				e, ok := f.table[h]
				if !ok {
					continue
				}
				out = append(out, kvevents.Event{Kind: kvevents.Removed, Tier: tier, Hash: e.ours})
				if e.tiers &^= bit; e.tiers == 0 {
					delete(f.table, h)
				} else {
					f.table[h] = e
				}
			}
		}
	}
	out = f.boundLocked(out)
	f.b.index.Apply(out)
	f.out = out[:0]
}

// vllmFeed is one backend's state of the vLLM-format stream; it is the backend's eventSource.
type vllmFeed struct {
	b   *Backend
	max int // table bound (the index's)

	mu        sync.Mutex
	blockSize int                // 0: none seen since the last reset
	seqs      map[int64]uint64   // next sequence number expected, by data-parallel rank
	table     map[uint64]vllmRef // engine hash → our hash
	out       []kvevents.Event   // scratch
	tokens    float64            // rate bucket
	refill    time.Time
	flooded   bool
	st        kvevents.SubscriberStats
}

type vllmRef struct {
	ours  prefix.Hash
	tiers uint8
}

// root is the chain root of a block stored without a parent: our identity, salted by the
// LoRA adapter when there is one (an adapter's blocks never match the base model's prompts).
func (f *vllmFeed) root(ev *vllmevents.Event) prefix.Hash {
	salt := ""
	switch {
	case ev.LoraName != "":
		salt = "lora:" + ev.LoraName
	case ev.HasLoraID:
		salt = fmt.Sprintf("lora-id:%d", ev.LoraID)
	}
	return prefix.Root(vllmChainIdentity, salt)
}

// resetLocked empties the table and the index, for blocks of bs tokens (0: unknown yet).
func (f *vllmFeed) resetLocked(bs int) {
	f.blockSize = bs
	f.seqs = map[int64]uint64{}
	f.table = map[uint64]vllmRef{}
	f.st.Resyncs++
	f.b.index.Reset(kvevents.Snapshot{Epoch: 1, Identity: hex.EncodeToString(vllmChainIdentity), BlockSize: bs})
}

// take spends cost from the rate bucket (rate a second, burst rate).
func (f *vllmFeed) take(cost, rate float64, now time.Time) bool {
	if f.refill.IsZero() {
		f.tokens, f.refill = rate, now
	}
	f.tokens = min(rate, f.tokens+now.Sub(f.refill).Seconds()*rate)
	f.refill = now
	if f.tokens < cost {
		return false
	}
	f.tokens -= cost
	return true
}

// boundLocked drops an eighth of the table past its bound, removing those blocks from the
// index too (a block the table forgot could never be removed). REQUIRES: f.mu.
func (f *vllmFeed) boundLocked(out []kvevents.Event) []kvevents.Event {
	if len(f.table) <= f.max {
		return out
	}
	drop := len(f.table) - f.max + f.max/8
	for h, e := range f.table {
		if drop == 0 {
			break
		}
		drop--
		for t := range kvtier.Count {
			if e.tiers&(1<<t) != 0 {
				out = append(out, kvevents.Event{Kind: kvevents.Removed, Tier: kvtier.Tier(t), Hash: e.ours})
			}
		}
		delete(f.table, h)
	}
	return out
}

// Stats implements eventSource. The stream has no heartbeats: an idle replica and a silent one
// look alike, so the index counts as live while synced (a block size known) and the backend's
// health checks take a dead replica out.
func (f *vllmFeed) Stats() kvevents.SubscriberStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Synced = f.blockSize > 0
	st.Connected = st.Synced
	if st.Synced {
		st.LastEvent = time.Now()
	}
	return st
}
