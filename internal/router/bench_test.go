package router

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/vllmevents"
)

const cannedCompletion = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"stub","choices":[{"index":0,"text":" ok","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":64,"completion_tokens":1,"total_tokens":65,"prompt_tokens_details":{"cached_tokens":48}}}`

// BenchmarkAddedLatency measures the router's added latency against a
// stub backend answering a canned completion, routed and direct requests
// interleaved at a steady rate in the same run. It reports p50/p99 of both
// and their difference (added-p50-us, added-p99-us), plus the router's own
// pre-upstream time (overhead-mean-us: body read + parse + decision).
func BenchmarkAddedLatency(b *testing.B) {
	const blockSize = 16
	identity := []byte("bench-model")
	// The prompt an indexed replica holds: 2048 tokens (128 blocks), an agent turn's size.
	long := make([]int32, 2048)
	for i := range long {
		long[i] = int32(i * 7 % 4096)
	}
	pub, err := kvevents.NewPublisher(kvevents.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pub.SetIdentity(hex.EncodeToString(identity), blockSize)
	for _, h := range prefix.BlockHashes(prefix.Root(identity, ""), long, blockSize) {
		pub.Publish(kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Device, Hash: h, Time: time.Now()})
	}
	tokenized := `{"tokens":` + jsonInts(long) + `}`
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/completions":
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, cannedCompletion)
		case r.URL.Path == "/tokenize":
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, tokenized)
		case strings.HasPrefix(r.URL.Path, "/v1/kv-events"):
			pub.Handler().ServeHTTP(w, r)
		case r.URL.Path == "/health":
			w.WriteHeader(200)
		default:
			http.NotFound(w, r)
		}
	}))
	defer stub.Close()
	toks := make([]int32, 512)
	for i := range toks {
		toks[i] = int32(i * 7 % 4096)
	}
	text := `"` + strings.Repeat("lorem ipsum dolor sit amet ", 300) + `"`
	cases := []struct {
		name, policy, body string
		session            bool
		unique             bool // a new prompt each request (no /tokenize answer to reuse)
		zmq                bool // the index fed by vLLM-format events on --kv-events-listen
	}{
		{"round-robin", "round-robin", `{"prompt":"hello","max_tokens":1}`, false, false, false},
		{"prefix", "prefix", `{"prompt":"hello","max_tokens":1}`, true, false, false},
		{"kv-aware", "kv-aware", `{"prompt":` + jsonInts(toks) + `,"max_tokens":1}`, false, false, false},
		// The replica's index holds the whole 2048-token prompt: the pick hashes 128 blocks.
		{"kv-aware-indexed-2k", "kv-aware", `{"prompt":` + jsonInts(long) + `,"max_tokens":1}`, false, false, false},
		// The same, the index fed by vLLM's wire format (ZeroMQ, msgpack, rehashed from
		// token_ids) instead of the native stream.
		{"kv-aware-zmq-indexed-2k", "kv-aware", `{"prompt":` + jsonInts(long) + `,"max_tokens":1}`, false, false, true},
		// A text prompt: the router asks the replica's /tokenize first (once: repeats hit
		// the router's cache), and a new text prompt every time (always asks).
		{"kv-aware-text-2k", "kv-aware", `{"prompt":` + text + `,"max_tokens":1}`, false, false, false},
		{"kv-aware-text-2k-unique", "kv-aware", `{"prompt":` + text + `,"max_tokens":1,"user":"%d"}`, false, true, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Policy = c.policy
			cfg.Backends = []string{stub.URL}
			reg := prometheus.NewRegistry()
			cfg.Registerer, cfg.Gatherer = reg, reg
			if c.zmq {
				cfg.KVEventsListen = "tcp://127.0.0.1:0"
			}
			rt, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			if c.zmq {
				publishVLLM(b, rt, stub.URL, long, blockSize)
			}
			if c.policy == "kv-aware" {
				waitIndexed(b, rt)
			}
			front := httptest.NewServer(rt.Handler())
			defer front.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			seq := 0
			do := func(base string) time.Duration {
				body := c.body
				if c.unique {
					// The text's first bytes change, so the prompt differs from the start.
					seq++
					body = strings.Replace(fmt.Sprintf(c.body, seq), `"prompt":"`, fmt.Sprintf(`"prompt":"%d `, seq), 1)
				}
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if c.session {
					req.Header.Set("X-Session-ID", "s1")
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if resp.StatusCode != 200 {
					b.Fatalf("HTTP %d", resp.StatusCode)
				}
				return d
			}
			for range 50 { // warm connections on both paths
				do(stub.URL)
				do(front.URL)
			}
			var direct, routed []time.Duration
			tick := time.NewTicker(500 * time.Microsecond) // steady 2000 pairs/s offered
			defer tick.Stop()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				if i%2 == 0 {
					direct = append(direct, do(stub.URL))
					routed = append(routed, do(front.URL))
				} else {
					routed = append(routed, do(front.URL))
					direct = append(direct, do(stub.URL))
				}
			}
			b.StopTimer()
			pct := func(ds []time.Duration, p float64) float64 {
				s := slices.Clone(ds)
				slices.Sort(s)
				return float64(s[int(p*float64(len(s)-1))]) / 1e3
			}
			b.ReportMetric(pct(direct, 0.5), "direct-p50-us")
			b.ReportMetric(pct(direct, 0.99), "direct-p99-us")
			b.ReportMetric(pct(routed, 0.5), "routed-p50-us")
			b.ReportMetric(pct(routed, 0.99), "routed-p99-us")
			b.ReportMetric(pct(routed, 0.5)-pct(direct, 0.5), "added-p50-us")
			b.ReportMetric(pct(routed, 0.99)-pct(direct, 0.99), "added-p99-us")
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				switch mf.GetName() {
				case "stockpot_router_overhead_seconds":
					h := mf.GetMetric()[0].GetHistogram()
					b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e6, "overhead-mean-us")
					// The router's own time at p99, as the upper bound of the histogram
					// bucket holding it (buckets double from 5 µs): free of the client's
					// and the stub's scheduling noise that dominates routed-p99 here.
					for _, bk := range h.GetBucket() {
						if float64(bk.GetCumulativeCount()) >= 0.99*float64(h.GetSampleCount()) {
							b.ReportMetric(bk.GetUpperBound()*1e6, "overhead-p99-le-us")
							break
						}
					}
				case "stockpot_router_decisions_total":
					if c.name == "kv-aware-indexed-2k" {
						for _, m := range mf.GetMetric() {
							for _, l := range m.GetLabel() {
								if l.GetName() == "reason" && l.GetValue() != "cache" {
									b.Fatalf("indexed case decided by %q, want cache", l.GetValue())
								}
							}
						}
					}
				}
			}
		})
	}
}

// publishVLLM publishes tokens' blocks to rt's vLLM-format SUB as the replica at backend
// would (a BlockStored of every block, vLLM's 64-bit hashes of its own), until rt's index holds
// them (a PUB drops what it sends before the subscription reaches it).
func publishVLLM(b *testing.B, rt *Router, backend string, tokens []int32, blockSize int) {
	u, _ := url.Parse(backend)
	pub, err := vllmevents.NewPublisher(vllmevents.PublisherConfig{Endpoint: "tcp://" + rt.KVEventsAddr(), Topic: "kv@" + u.Host + "@bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pub.Close)
	n := len(tokens) / blockSize
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	ev := vllmevents.Event{Type: "BlockStored", BlockHashes: hashes, TokenIDs: tokens[:n*blockSize], BlockSize: blockSize}
	deadline := time.Now().Add(time.Minute)
	for be := rt.backends()[0]; be.index.Len() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the router's index holds %d of %d blocks", be.index.Len(), n)
		}
		pub.Publish([]vllmevents.Event{{Type: "AllBlocksCleared"}, ev})
	}
}

// waitIndexed waits until every backend's event stream is in sync (the kv-aware cases need
// the stub's index loaded before the clock starts).
func waitIndexed(b *testing.B, rt *Router) {
	deadline := time.Now().Add(10 * time.Second)
	for _, be := range rt.backends() {
		for !be.liveIndex(time.Minute) || be.index.Len() == 0 {
			if time.Now().After(deadline) {
				b.Fatal("the stub's event stream never synced")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func jsonInts(v []int32) string {
	out := make([]byte, 0, 6*len(v)+2)
	out = append(out, '[')
	for i, t := range v {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendInt(out, int64(t), 10)
	}
	return string(append(out, ']'))
}

// BenchmarkPick is the policy's share of the overhead: kv-aware hashes a
// prompt's blocks and walks 4 replicas' indexes, holding 1/4 to all of it.
// "short" is a 512-token prompt in blocks of 4 (128 blocks); "2k" is 2048
// tokens in blocks of 16 (128 blocks, the engine's block size), and "2k-cold"
// the same prompt when no replica holds any of it (a new conversation).
func BenchmarkPick(b *testing.B) {
	t := &testing.T{}
	for _, c := range []struct {
		name       string
		tokens, bs int
		held       bool
		policies   []string
	}{
		{"short", 512, 4, true, []string{"random", "prefix", "kv-aware"}},
		{"2k", 2048, 16, true, []string{"kv-aware"}},
		{"2k-cold", 2048, 16, false, []string{"kv-aware"}},
	} {
		bs := testBackends(t, 4)
		toks := make([]int32, c.tokens)
		for i := range toks {
			toks[i] = int32(i)
		}
		for _, be := range bs {
			be.index.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: c.bs})
		}
		hs := prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, c.bs)
		if c.held {
			for i, be := range bs {
				storeChain(be, hs[:len(hs)*(i+1)/4], kvtier.Device)
			}
		}
		for _, name := range c.policies {
			b.Run(c.name+"/"+name, func(b *testing.B) {
				p, _ := NewPolicy(name, PolicyConfig{PrefixTokens: 256})
				b.ReportAllocs()
				for b.Loop() {
					rq := &Request{Tokens: toks}
					p.Pick(rq, bs)
					rq.release() // as the router does once the request is forwarded
				}
			})
			if name != "kv-aware" {
				continue
			}
			// With no chain-hash cache (every block hashed with SHA-256; see also
			// BenchmarkChainExtend for a cache miss).
			b.Run(c.name+"/kv-aware-no-cache", func(b *testing.B) {
				p, _ := NewPolicy(name, PolicyConfig{PrefixTokens: 256})
				p.(*kvAware).hashes = nil
				b.ReportAllocs()
				for b.Loop() {
					p.Pick(&Request{Tokens: toks}, bs)
				}
			})
		}
		b.Run(c.name+"/block-hashes-only", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, c.bs)
			}
		})
	}
}

// BenchmarkAffinityKey: the fixed-seed affinity hash (placement the same on every router)
// against hash/maphash, the per-process-seeded hash it replaced, on a session ID and on the
// first 256 tokens of a prompt without one. State the cost as the ratio of the two.
func BenchmarkAffinityKey(b *testing.B) {
	toks := make([]int32, 1024)
	for i := range toks {
		toks[i] = int32(i * 7919)
	}
	seed := maphash.MakeSeed()
	b.Run("session/stable", func(b *testing.B) {
		for b.Loop() {
			(&Request{SessionID: "agent-session-0123456789"}).affinityKey(256)
		}
	})
	b.Run("session/maphash", func(b *testing.B) {
		for b.Loop() {
			var h maphash.Hash
			h.SetSeed(seed)
			h.WriteString("s:")
			h.WriteString("agent-session-0123456789")
			_ = h.Sum64()
		}
	})
	b.Run("tokens/stable", func(b *testing.B) {
		for b.Loop() {
			(&Request{Tokens: toks}).affinityKey(256)
		}
	})
	b.Run("tokens/maphash", func(b *testing.B) {
		var buf [4]byte
		for b.Loop() {
			var h maphash.Hash
			h.SetSeed(seed)
			h.WriteString("t:")
			h.WriteByte(0)
			for _, t := range toks[:256] {
				binary.LittleEndian.PutUint32(buf[:], uint32(t))
				h.Write(buf[:])
			}
			_ = h.Sum64()
		}
	})
}

// BenchmarkPickAdded is the kv-aware pick's added latency at p50 and p99: one stub backend
// whose index holds a 2048-token prompt (128 blocks of 16), a round-robin router and a
// kv-aware router in front of it, and each round sends the same token-array body direct, through
// round-robin and through kv-aware, in a rotating order, at a steady rate, in the same run.
// Reported, in µs: each path's p50/p99; rr-added and kv-added (routed minus direct: the proxy
// hop, and for kv-aware the body scan, the chain hashes and the index walk too); kv-over-rr
// (kv-aware minus round-robin: what the pick itself adds); and each router's own pre-upstream
// time at p50/p99 (body read, scan, pick; exact, from Router.onOverhead), which carries none of
// the client's or the stub's scheduling noise that dominates the end-to-end p99 on a loaded
// machine.
func BenchmarkPickAdded(b *testing.B) {
	const blockSize = 16
	identity := []byte("bench-model")
	long := make([]int32, 2048)
	for i := range long {
		long[i] = int32(i * 7 % 4096)
	}
	pub, err := kvevents.NewPublisher(kvevents.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pub.SetIdentity(hex.EncodeToString(identity), blockSize)
	for _, h := range prefix.BlockHashes(prefix.Root(identity, ""), long, blockSize) {
		pub.Publish(kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Device, Hash: h, Time: time.Now()})
	}
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/completions":
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, cannedCompletion)
		case strings.HasPrefix(r.URL.Path, "/v1/kv-events"):
			pub.Handler().ServeHTTP(w, r)
		case r.URL.Path == "/health":
			w.WriteHeader(200)
		default:
			http.NotFound(w, r)
		}
	}))
	defer stub.Close()
	body := `{"prompt":` + jsonInts(long) + `,"max_tokens":1}`
	type path struct {
		name  string
		url   string
		lat   []time.Duration
		own   []time.Duration // the router's pre-upstream time (routers only)
		route *Router
	}
	paths := []*path{{name: "direct", url: stub.URL}, {name: "rr"}, {name: "kv"}}
	for _, p := range paths[1:] {
		cfg := DefaultConfig()
		cfg.Policy = map[string]string{"rr": "round-robin", "kv": "kv-aware"}[p.name]
		cfg.Backends = []string{stub.URL}
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
		rt, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close()
		if p.name == "kv" {
			waitIndexed(b, rt)
		}
		p.route = rt
		rt.onOverhead = func(d time.Duration) { p.own = append(p.own, d) }
		front := httptest.NewServer(rt.Handler())
		defer front.Close()
		p.url = front.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := func(base string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != 200 {
			b.Fatalf("HTTP %d", resp.StatusCode)
		}
		return d
	}
	for range 50 { // warm connections on every path
		for _, p := range paths {
			do(p.url)
		}
	}
	for _, p := range paths {
		p.lat, p.own = p.lat[:0], p.own[:0]
	}
	tick := time.NewTicker(time.Millisecond) // a steady 1000 rounds/s offered
	defer tick.Stop()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		for k := range paths {
			p := paths[(i+k)%len(paths)]
			p.lat = append(p.lat, do(p.url))
		}
	}
	b.StopTimer()
	pct := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))]) / 1e3
	}
	direct, rr, kv := paths[0], paths[1], paths[2]
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		for _, p := range paths {
			b.ReportMetric(pct(p.lat, q.q), p.name+"-"+q.name+"-us")
		}
		b.ReportMetric(pct(rr.lat, q.q)-pct(direct.lat, q.q), "rr-added-"+q.name+"-us")
		b.ReportMetric(pct(kv.lat, q.q)-pct(direct.lat, q.q), "kv-added-"+q.name+"-us")
		b.ReportMetric(pct(kv.lat, q.q)-pct(rr.lat, q.q), "kv-over-rr-"+q.name+"-us")
		b.ReportMetric(pct(rr.own, q.q), "rr-own-"+q.name+"-us")
		b.ReportMetric(pct(kv.own, q.q), "kv-own-"+q.name+"-us")
	}
}
