package router

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"stockpot/internal/prefix"
	"stockpot/internal/vllmevents"
)

// fakeVLLM is a test double of a vLLM (or SGLang) replica: a prefix cache of 16-token blocks
// keyed by its own hash recipe (seeded: nothing the router could recompute), /v1/completions
// answering with usage.prompt_tokens_details.cached_tokens as vLLM does, and its block events
// published to the router's SUB in vLLM's wire format, as maps (vLLM 0.26) or positional
// arrays (older vLLM; with signed hashes, SGLang).
type fakeVLLM struct {
	t      *testing.T
	name   string
	shape  string // "map", "array" or "sglang"
	seed   uint64
	srv    *httptest.Server
	pub    zmq4.Socket
	topic  []byte
	mu     sync.Mutex
	seq    uint64
	held   map[uint64]bool
	hashes [][]uint64 // per warmed prompt, its blocks' hashes (for removal)
}

const fakeBlock = 16

func newFakeVLLM(t *testing.T, name, shape string, seed uint64, routerSub string) *fakeVLLM {
	f := &fakeVLLM{t: t, name: name, shape: shape, seed: seed, held: map[uint64]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	u, _ := url.Parse(f.srv.URL)
	f.topic = []byte("kv@" + u.Host + "@fake-model")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.pub = zmq4.NewPub(ctx)
	t.Cleanup(func() { f.pub.Close() })
	if err := f.pub.Dial("tcp://" + routerSub); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeVLLM) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		w.Write([]byte(`{"status":"ok"}`))
		return
	case "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var req struct {
		Prompt []int32 `json:"prompt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	cached := f.run(req.Prompt)
	fmt.Fprintf(w, `{"id":"cmpl-%s","object":"text_completion","model":"fake-model","choices":[{"index":0,"text":" ok","finish_reason":"length"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		f.name, len(req.Prompt), len(req.Prompt)+1, cached)
}

// run is the replica's prefix cache: the cached tokens of prompt (whole blocks, the last
// token always computed), then every full block stored, the new ones published.
func (f *fakeVLLM) run(prompt []int32) (cached int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var hs []uint64
	var parent uint64
	hit := true
	var stored []any
	var newHashes []uint64
	var newTokens []int32
	var newParent any
	for i := 0; (i+1)*fakeBlock <= len(prompt); i++ {
		toks := prompt[i*fakeBlock : (i+1)*fakeBlock]
		h := f.hash(parent, i == 0, toks)
		if hit && f.held[h] && (i+1)*fakeBlock <= len(prompt)-1 {
			cached += fakeBlock
		} else {
			hit = false
		}
		if !f.held[h] {
			if len(newHashes) == 0 {
				newParent = nil
				if i > 0 {
					newParent = f.wireHash(parent)
				}
			}
			f.held[h] = true
			newHashes = append(newHashes, h)
			newTokens = append(newTokens, toks...)
		}
		hs = append(hs, h)
		parent = h
	}
	if len(newHashes) > 0 {
		stored = append(stored, f.storedEvent(newHashes, newParent, newTokens))
		f.publishLocked(stored)
	}
	f.hashes = append(f.hashes, hs)
	return cached
}

func (f *fakeVLLM) hash(parent uint64, root bool, toks []int32) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], f.seed)
	h.Write(b[:])
	if !root {
		binary.LittleEndian.PutUint64(b[:], parent)
		h.Write(b[:])
	}
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		h.Write(b[:4])
	}
	return h.Sum64()
}

// wireHash is a hash as the replica sends it: SGLang's Python hash() is signed.
func (f *fakeVLLM) wireHash(h uint64) any {
	if f.shape == "sglang" {
		return int64(h)
	}
	return h
}

func (f *fakeVLLM) storedEvent(hs []uint64, parent any, toks []int32) any {
	wh := make([]any, len(hs))
	for i, h := range hs {
		wh[i] = f.wireHash(h)
	}
	if f.shape == "map" {
		return map[string]any{"type": "BlockStored", "block_hashes": wh, "parent_block_hash": parent, "token_ids": toks,
			"block_size": fakeBlock, "lora_id": nil, "medium": "GPU", "lora_name": nil}
	}
	return []any{"BlockStored", wh, parent, toks, fakeBlock, nil, "GPU"}
}

func (f *fakeVLLM) removedEvent(hs []uint64) any {
	wh := make([]any, len(hs))
	for i, h := range hs {
		wh[i] = f.wireHash(h)
	}
	if f.shape == "map" {
		return map[string]any{"type": "BlockRemoved", "block_hashes": wh, "medium": "GPU"}
	}
	return []any{"BlockRemoved", wh, "GPU"}
}

// evictAll drops every block and publishes their removal.
func (f *fakeVLLM) evictAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	var hs []uint64
	for h := range f.held {
		hs = append(hs, h)
	}
	clear(f.held)
	f.publishLocked([]any{f.removedEvent(hs)})
}

func (f *fakeVLLM) publishLocked(events []any) {
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).Encode([]any{1.5, events, 0}); err != nil {
		f.t.Fatal(err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], f.seq)
	f.seq++
	if err := f.pub.Send(zmq4.NewMsgFrom(f.topic, sb[:], buf.Bytes())); err != nil {
		f.t.Error(err)
	}
}

// connect publishes empty batches until the router has applied one (a PUB drops what it
// sends before the subscriber's connection is up).
func (f *fakeVLLM) connect(rt *Router, id string) {
	f.t.Helper()
	waitUntil(f.t, f.name+"'s events reaching the router", func() bool {
		f.mu.Lock()
		f.publishLocked([]any{})
		f.mu.Unlock()
		return zmqCounter(f.t, rt, "stockpot_router_kv_zmq_messages_total", map[string]string{"backend": id}) > 0
	})
}

// zmqCounter sums a counter's series whose labels include want.
func zmqCounter(t *testing.T, rt *Router, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func newZMQRouter(t *testing.T, policy string, backends []string, rate float64) *Router {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Policy, cfg.Backends, cfg.Registerer, cfg.Gatherer = policy, backends, reg, reg
	cfg.KVEventsListen, cfg.KVEventsMaxRate = "tcp://127.0.0.1:0", rate
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

func zmqBackend(t *testing.T, rt *Router, u string) *Backend {
	t.Helper()
	for _, b := range rt.backends() {
		if b.URL.String() == u {
			return b
		}
	}
	t.Fatalf("no backend %s", u)
	return nil
}

func prompt(seed, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1000 + (seed*7919+i*31)%30000)
	}
	return p
}

func complete(t *testing.T, base string, p []int32) (replica string, cached int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "fake-model", "prompt": p, "max_tokens": 1})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		ID    string `json:"id"`
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
	}
	return strings.TrimPrefix(out.ID, "cmpl-"), out.Usage.Details.Cached
}

// TestVLLMEventsRouting: replicas publishing vLLM-format events in each shape behind the
// router's SUB; kv-aware sends a prompt to the replica whose blocks the events announced, the
// replica's own usage proves the hit, and BlockRemoved takes the blocks out of the index.
func TestVLLMEventsRouting(t *testing.T) {
	rt := newZMQRouter(t, "kv-aware", nil, 0)
	sub := rt.KVEventsAddr()
	fakes := []*fakeVLLM{newFakeVLLM(t, "a", "map", 11, sub), newFakeVLLM(t, "b", "array", 22, sub), newFakeVLLM(t, "c", "sglang", 33, sub)}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	for _, f := range fakes {
		id, err := rt.AddBackend(f.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		f.connect(rt, id)
	}
	for i, f := range fakes {
		p := prompt(i+1, 8*fakeBlock+5)
		f.run(p) // warm the replica directly: only its events tell the router
		b := zmqBackend(t, rt, f.srv.URL)
		waitUntil(t, f.name+"'s 8 blocks in the index", func() bool { return b.index.Len() == 8 })
		// The blocks sit in the router's own chain: the request's hashes find all 8.
		req := &Request{Tokens: p}
		id, bs, ok := b.index.chain()
		if n, _ := b.index.match(req.blockHashes(id, bs), &defaultTierWeights, nil); !ok || bs != fakeBlock || n != 8 {
			t.Fatalf("%s: chain ok=%v bs=%d matched %d", f.name, ok, bs, n)
		}
		for range 3 { // the same long prefix, another question: to the replica that holds it
			q := append(append([]int32(nil), p[:8*fakeBlock]...), prompt(100+i, 20)...)
			got, cached := complete(t, srv.URL, q)
			if got != f.name || cached < 8*fakeBlock {
				t.Fatalf("prompt warmed on %s went to %s with %d cached tokens", f.name, got, cached)
			}
		}
	}
	for _, f := range fakes {
		f.evictAll()
		b := zmqBackend(t, rt, f.srv.URL)
		waitUntil(t, f.name+"'s index emptied by BlockRemoved", func() bool { return b.index.Len() == 0 })
	}
	if n := zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", nil); n != 0 {
		t.Fatalf("%v rejected", n)
	}
}

// rawPub sends hand-made messages to the router's SUB.
type rawPub struct {
	t    *testing.T
	sock zmq4.Socket
}

func (p rawPub) send(frames ...[]byte) {
	if err := p.sock.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		p.t.Fatal(err)
	}
}

func seqBytes(s uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], s)
	return b[:]
}

func batchBytes(t *testing.T, events ...any) []byte {
	var buf bytes.Buffer
	if events == nil {
		events = []any{} // msgpack writes a nil slice as nil
	}
	if err := msgpack.NewEncoder(&buf).Encode([]any{1.0, events}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestVLLMEventsBadInput: what a broken or hostile publisher sends is counted, never applied
// wrongly, never a crash.
func TestVLLMEventsBadInput(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{}`)) }))
	defer be.Close()
	rt := newZMQRouter(t, "kv-aware", []string{be.URL}, 1000)
	b := rt.backends()[0]
	u, _ := url.Parse(be.URL)
	topic := []byte("kv@" + u.Host + "@m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := zmq4.NewPub(ctx)
	defer sock.Close()
	if err := sock.Dial("tcp://" + rt.KVEventsAddr()); err != nil {
		t.Fatal(err)
	}
	p := rawPub{t, sock}
	seq := uint64(0)
	next := func() []byte { seq++; return seqBytes(seq - 1) }
	lbl := func(reason string) map[string]string { return map[string]string{"backend": b.ID, "reason": reason} }
	waitUntil(t, "the SUB connected", func() bool {
		p.send(topic, next(), batchBytes(t))
		return zmqCounter(t, rt, "stockpot_router_kv_zmq_messages_total", nil) > 0
	})
	toks := prompt(1, 2*fakeBlock)
	stored := func(hs []uint64, parent any, toks []int32) any {
		return map[string]any{"type": "BlockStored", "block_hashes": hs, "parent_block_hash": parent, "token_ids": toks, "block_size": fakeBlock, "lora_id": nil, "medium": "GPU", "lora_name": nil}
	}
	p.send(topic, next(), batchBytes(t, stored([]uint64{1, 2}, nil, toks)))
	waitUntil(t, "two blocks indexed", func() bool { return b.index.Len() == 2 })
	root := prefix.Root(vllmChainIdentity, "")
	h1 := prefix.Chain(root, toks[:fakeBlock], nil)
	h2 := prefix.Chain(h1, toks[fakeBlock:], nil)
	if n, _ := b.index.match([]prefix.Hash{h1, h2}, &defaultTierWeights, nil); n != 2 {
		t.Fatalf("rehashed chain matched %d", n)
	}

	// Each of these is counted and leaves the index as it was.
	p.send(topic, next())                                                                                    // two frames
	p.send([]byte("kv@10.9.9.9:1@m"), seqBytes(0), batchBytes(t))                                            // a topic naming no backend
	p.send([]byte("garbage topic"), seqBytes(0), batchBytes(t))                                              // nor this
	p.send(topic, []byte{1, 2}, batchBytes(t))                                                               // a short sequence frame
	p.send(topic, next(), batchBytes(t, map[string]any{"type": "BlockPinned", "block_hashes": []uint64{1}})) // an unknown type
	p.send(topic, next(), batchBytes(t, stored([]uint64{7}, uint64(99), toks[:fakeBlock])))                  // a parent never seen
	p.send(topic, next(), batchBytes(t, map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{1}, "medium": "TAPE"}))
	waitUntil(t, "the bad messages counted", func() bool {
		return zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("frames")) == 1 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", map[string]string{"backend": "unknown", "reason": "topic"}) == 2 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("seq_frame")) == 1 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("unknown_type")) == 1 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("medium")) == 1 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_unplaced_blocks_total", map[string]string{"backend": b.ID}) == 1
	})
	if b.index.Len() != 2 {
		t.Fatalf("index has %d blocks after bad input, want 2", b.index.Len())
	}

	// Malformed msgpack, a sequence gap and a flood may each have lost a BlockRemoved: the
	// index is emptied (never left holding a block the replica may have dropped).
	for _, c := range []struct {
		reason string
		send   func()
	}{
		{"msgpack", func() { p.send(topic, next(), []byte{0x93, 0xc1}) }},
		{"gap", func() { seq += 5; p.send(topic, next(), batchBytes(t)) }},
		{"flood", func() {
			many := make([]uint64, 3000) // past the bucket of 1000 events
			p.send(topic, next(), batchBytes(t, map[string]any{"type": "BlockRemoved", "block_hashes": many, "medium": nil}))
		}},
	} {
		p.send(topic, next(), batchBytes(t, stored([]uint64{1, 2}, nil, toks)))
		waitUntil(t, "blocks indexed before "+c.reason, func() bool { return b.index.Len() == 2 })
		c.send()
		waitUntil(t, "the index emptied on "+c.reason, func() bool {
			return b.index.Len() == 0 && zmqCounter(t, rt, "stockpot_router_kv_zmq_resets_total", lbl(c.reason)) == 1
		})
	}
	if zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("flood")) < 1 || zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("msgpack")) != 1 {
		t.Fatal("flood or msgpack not counted as rejected")
	}
	// A publisher that restarts (its sequence back to 0) is a restart, and the stream goes on.
	p.send(topic, next(), batchBytes(t)) // the sequence followed again (one connection: in order)
	seq = 0
	p.send(topic, next(), batchBytes(t, stored([]uint64{1, 2}, nil, toks)))
	waitUntil(t, "a restarted publisher's blocks indexed", func() bool {
		return b.index.Len() == 2 && zmqCounter(t, rt, "stockpot_router_kv_zmq_resets_total", lbl("restart")) == 1
	})
	if _, _, err := vllmevents.DecodeBatch(nil); err == nil {
		t.Fatal("empty payload decoded")
	}
}
