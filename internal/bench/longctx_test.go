package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeLongServer is a small model of Stockpot's cache for the longctx workload: a prompt is
// held by a set of tiers; a request's cached tokens come from the first tier that holds it
// (whole reuse units of 64 tokens, the last prompt token computed), the pool then holds it, and
// a restore from disk or remote promotes it to host, as Stockpot does. A pinned prewarm
// writes it to every lower tier. The remote tier is "slow": its blocks are discarded as
// slower_than_recompute, so the bench sees the cost model choose recompute there. /tokenize
// gives 2 tokens a word plus BOS; the counters move as the server's do.
type fakeLongServer struct {
	t        *testing.T
	context  int      // the longest prompt it takes, less one
	card     int      // the context its model card says
	tiers    []string // lower tiers, fastest first
	adminKey string
	// slowRemote: the remote tier's blocks are discarded as slower than recompute; failRemote:
	// the remote read fails (a call timeout), so nothing is restored or discarded.
	slowRemote, failRemote bool

	mu       sync.Mutex
	held     map[string]map[string]bool // tier → prompts it holds
	counters map[string]float64
	calls    []string // admin calls and requests in order
	heads    []string // each distinct prompt's first 8 words
}

const (
	fakeBlock      = 16
	fakeUnit       = 64   // block × --state-checkpoint-blocks 4
	fakeBlockBytes = 1600 // 100 B of K/V a token
	fakeStateBytes = 1000
	fakePoolBlocks = 4096
)

func newFakeLongServer(t *testing.T, context int, tiers ...string) (*fakeLongServer, *httptest.Server) {
	f := &fakeLongServer{t: t, context: context, card: context, tiers: tiers, adminKey: "adm", slowRemote: true,
		held: map[string]map[string]bool{}, counters: map[string]float64{}}
	for _, tr := range append([]string{"device"}, tiers...) {
		f.held[tr] = map[string]bool{}
	}
	if slices.Contains(tiers, "remote") {
		f.counters["stockpot_kv_remote_failed_calls_total"] = 0 // Stockpot exports it from the start
	}
	s := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(s.Close)
	return f, s
}

func fakeTokens(text string) int { return 1 + 2*len(strings.Fields(text)) }

func (f *fakeLongServer) admin(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+f.adminKey
}

func (f *fakeLongServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body map[string]any
	if r.Body != nil {
		json.NewDecoder(r.Body).Decode(&body)
	}
	prompt, _ := body["prompt"].(string)
	adminOnly := func() bool {
		if !f.admin(r) {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"admin key required","type":"authentication_error"}}`)
			return false
		}
		return true
	}
	switch {
	case r.URL.Path == "/v1/models":
		fmt.Fprintf(w, `{"data":[{"id":"fake-k3","max_model_len":%d,"stockpot":{"context_length":%d,"block_size":%d,"min_reusable_tokens":%d,"state_bytes":%d}}]}`,
			f.card, f.card, fakeBlock, fakeUnit, fakeStateBytes)
	case r.URL.Path == "/tokenize":
		ids := make([]int, fakeTokens(prompt))
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids)})
	case r.URL.Path == "/v1/completions":
		f.complete(w, prompt)
	case r.URL.Path == "/v1/cache" && r.Method == http.MethodGet:
		if !adminOnly() {
			return
		}
		type tierRow struct {
			Tier          string `json:"tier"`
			Blocks        int64  `json:"blocks"`
			Bytes         int64  `json:"bytes"`
			CapacityBytes int64  `json:"capacity_bytes"`
			UsedBlocks    int    `json:"used_blocks"`
			CachedBlocks  int    `json:"cached_blocks"`
			FreeBlocks    int    `json:"free_blocks"`
		}
		var rows []tierRow
		for _, tr := range append([]string{"device"}, f.tiers...) {
			n := f.blocksIn(tr)
			row := tierRow{Tier: tr, Blocks: int64(n), Bytes: int64(n) * fakeBlockBytes, CapacityBytes: fakePoolBlocks * fakeBlockBytes}
			if tr == "remote" {
				row = tierRow{Tier: tr} // as Redis: a shared store counts nothing for one server
			}
			if tr == "device" {
				row.CachedBlocks, row.FreeBlocks = n, fakePoolBlocks-n
			}
			rows = append(rows, row)
		}
		json.NewEncoder(w).Encode(map[string]any{"tiers": rows})
	case r.URL.Path == "/v1/cache" && r.Method == http.MethodDelete:
		if !adminOnly() {
			return
		}
		tier := r.URL.Query().Get("tier")
		f.calls = append(f.calls, "drop "+cmp(tier, "all"))
		for tr := range f.held {
			if tier == "" || tier == tr {
				f.held[tr] = map[string]bool{}
			}
		}
		fmt.Fprint(w, `{"object":"cache.dropped","tiers":{}}`)
	case r.URL.Path == "/v1/cache/prewarm":
		if !adminOnly() {
			return
		}
		f.calls = append(f.calls, "prewarm")
		for tr := range f.held {
			f.held[tr][prompt] = true
		}
		fmt.Fprintf(w, `{"pinned_tokens":%d}`, fakeTokens(prompt)/fakeBlock*fakeBlock)
	case r.URL.Path == "/v1/kv-events/snapshot":
		if !adminOnly() {
			return
		}
		fmt.Fprint(w, `{"costs":{"prefill_tps":2000,"block_size":16,"block_bytes":1600,"read_bps":{"host":1e9,"disk":1e8,"remote":1e3}}}`)
	case r.URL.Path == "/metrics":
		if !adminOnly() {
			return
		}
		for k, v := range f.counters {
			fmt.Fprintf(w, "%s %g\n", k, v)
		}
		n := f.blocksIn("device")
		fmt.Fprintf(w, "stockpot_prefix_cache_queries_total %g\nstockpot_prefix_cache_hits_total %g\n", f.counters["q"], f.counters["h"])
		fmt.Fprintf(w, "stockpot_kv_cache_usage_bytes{tier=\"device\"} 0\nstockpot_kv_cache_cached_bytes{tier=\"device\"} %d\n", n*fakeBlockBytes)
		fmt.Fprintf(w, "stockpot_kv_state_checkpoint_bytes %d\nstockpot_kv_state_checkpoints{state=\"held\"} %d\nstockpot_kv_state_checkpoints{state=\"budget\"} 999\n", fakeStateBytes, n/4)
		fmt.Fprintf(w, "process_resident_memory_bytes %d\n", 50<<20+n*(fakeBlockBytes+fakeStateBytes/4))
	default:
		http.NotFound(w, r)
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// blocksIn is the full blocks of the prompts tier holds. REQUIRES: f.mu.
func (f *fakeLongServer) blocksIn(tier string) int {
	n := 0
	for p := range f.held[tier] {
		n += fakeTokens(p) / fakeBlock
	}
	return n
}

// complete answers a completion as Stockpot's stream does (max_tokens 1). REQUIRES: f.mu.
func (f *fakeLongServer) complete(w http.ResponseWriter, prompt string) {
	p := fakeTokens(prompt)
	if p >= f.context {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"prompt too long","type":"invalid_request_error"}}`)
		return
	}
	if !slices.Contains(f.heads, firstWords(prompt)) {
		f.heads = append(f.heads, firstWords(prompt))
	}
	from := "computed"
	for _, tr := range append([]string{"device"}, f.tiers...) {
		if f.held[tr][prompt] {
			from = tr
			break
		}
	}
	f.calls = append(f.calls, "request from "+from)
	cached := 0
	full := p / fakeBlock
	ttft := float64(p) * 0.5 // cold: 2000 tokens/s
	if from != "computed" {
		cached = (p - 1) / fakeUnit * fakeUnit
		found := full
		if from != "device" {
			if from == "remote" && f.failRemote {
				f.counters["stockpot_kv_remote_failed_calls_total"]++
				cached, from = 0, "computed"
			} else if from == "remote" && f.slowRemote {
				f.counters[`stockpot_kv_blocks_discarded_total{reason="slower_than_recompute"}`] += float64(found)
				cached, from = 0, "computed"
			} else {
				f.counters[fmt.Sprintf(`stockpot_engine_restored_blocks_total{tier=%q}`, from)] += float64(cached / fakeBlock)
				f.counters[`stockpot_kv_blocks_discarded_total{reason="incomplete_state"}`] += float64(found - cached/fakeBlock)
			}
		}
		if cached > 0 {
			ttft = map[string]float64{"device": 2, "host": 8, "disk": 20, "remote": 40}[from]
		}
	}
	f.counters[fmt.Sprintf(`stockpot_prompt_tokens_total{source=%q}`, from)] += float64(cached)
	f.counters[`stockpot_prompt_tokens_total{source="computed"}`] += float64(p - cached)
	f.counters["q"] += float64(p)
	f.counters["h"] += float64(cached)
	f.held["device"][prompt] = true
	if from == "disk" || from == "remote" {
		f.held["host"][prompt] = true // promotion
	}
	cache := map[string]int{"device_tokens": 0, "host_tokens": 0, "disk_tokens": 0, "remote_tokens": 0, "computed_tokens": p - cached}
	if from != "computed" {
		cache[from+"_tokens"] = cached
	}
	usage := map[string]any{"prompt_tokens": p, "completion_tokens": 1, "prompt_tokens_details": map[string]int{"cached_tokens": cached},
		"cache": cache, "timings": map[string]float64{"queue_ms": 0.1, "restore_ms": ttft / 2, "prefill_ms": ttft / 2, "ttft_ms": ttft}}
	ub, _ := json.Marshal(usage)
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" x\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", ub)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func firstWords(s string) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(len(f), 12)], " ")
}

// noQuietPause drops quiesce's pause for a test against the fake, whose drops leave no work
// behind.
func noQuietPause(t *testing.T) {
	old := quietPause
	quietPause = 0
	t.Cleanup(func() { quietPause = old })
}

func longConfig(target string, lengths ...int) Config {
	c := DefaultConfig()
	c.Target, c.Workload, c.Lengths, c.AdminKey = target, "longctx", lengths, "adm"
	return c
}

// TestLongCtxAgainstFake: per length the bench clears the cache, sends the prompt cold and
// again (the pool), stages it down with a pinned prewarm, then makes each lower tier in turn
// the first holder by dropping the pool and the tiers above it (again after a promotion); the
// steps say where the cached tokens came from and what the cost model decided; a length past
// the context is skipped; memory matches the linear model and grows with the length.
func TestLongCtxAgainstFake(t *testing.T) {
	noQuietPause(t)
	f, s := newFakeLongServer(t, 8192, "host", "disk", "remote")
	rep, err := Run(context.Background(), longConfig(s.URL, 1000, 2000, 16384))
	if err != nil {
		t.Fatal(err)
	}
	lc := rep.LongCtx
	if lc == nil {
		t.Fatal("no longctx section")
	}
	perLength := []string{"drop all", "request from computed", "request from device", "prewarm",
		"drop device", "request from host",
		"drop device", "drop host", "request from disk",
		"drop device", "drop host", "drop disk", "request from remote"}
	if want := append(slices.Clone(perLength), perLength...); !slices.Equal(f.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	if len(f.heads) != 2 {
		t.Errorf("the two lengths' prompts share their start: %q", f.heads)
	}
	if !slices.Equal(lc.Tiers, []string{"host", "disk", "remote"}) || lc.BlockSize != 16 || lc.CheckpointBlocks != 4 || lc.StateBytes != fakeStateBytes {
		t.Errorf("server facts: %+v", lc)
	}
	if lc.KVBytesPerToken == nil || *lc.KVBytesPerToken != 100 || lc.CheckpointBytesPerToken == nil || *lc.CheckpointBytesPerToken != float64(fakeStateBytes)/64 {
		t.Errorf("bytes per token: kv %v, checkpoints %v; want 100 and %v", lc.KVBytesPerToken, lc.CheckpointBytesPerToken, float64(fakeStateBytes)/64)
	}
	if len(lc.Lengths) != 3 || lc.Lengths[2].Skipped == "" || !strings.Contains(lc.Lengths[2].Skipped, "context (8192 tokens)") {
		t.Fatalf("lengths: %+v", lc.Lengths)
	}
	for _, l := range lc.Lengths[:2] {
		if d := l.PromptTokens - l.Target; !l.Tokenized || d > 8 || d < -8 {
			t.Errorf("length %d: prompt %d tokens (tokenized %v), want within 8", l.Target, l.PromptTokens, l.Tokenized)
		}
		want := map[string]string{"cold": "computed", "device": "device", "host": "host", "disk": "disk", "remote": "computed"}
		if len(l.Steps) != 5 {
			t.Fatalf("length %d: %d steps", l.Target, len(l.Steps))
		}
		for _, st := range l.Steps {
			if st.Error != "" || st.From != want[st.Source] || st.TTFTMs == nil || st.PromptTokens != l.PromptTokens {
				t.Errorf("length %d %s: from %s (want %s), ttft %v, error %q", l.Target, st.Source, st.From, want[st.Source], st.TTFTMs, st.Error)
			}
		}
		full := l.PromptTokens / 16
		restored := (l.PromptTokens - 1) / 64 * 4
		host := l.step("host")
		wantD := fmt.Sprintf("restored %d of %d blocks found from host; the cost model chose restore for every block", restored, full)
		if full > restored {
			wantD += fmt.Sprintf("; %d past the last complete state checkpoint recomputed (incomplete_state)", full-restored)
		}
		if host.Decision != wantD {
			t.Errorf("host decision %q, want %q", host.Decision, wantD)
		}
		if !strings.HasPrefix(host.Verdict, "right: restoring gave TTFT 8 ms") || host.Costs == nil || host.Costs.ReadBPS["host"] != 1e9 {
			t.Errorf("host verdict %q, costs %+v", host.Verdict, host.Costs)
		}
		if h := host.ServerHitRate; h == nil || math.Abs(*h-float64(restored*16)/float64(l.PromptTokens)) > 1e-9 {
			t.Errorf("host hit rate %v", h)
		}
		remote := l.step("remote")
		if !strings.Contains(remote.Decision, fmt.Sprintf("restored 0 of %d blocks found from remote; recomputed %d: the cost model predicted their restore slower", full, full)) ||
			!strings.Contains(remote.Verdict, "consistent: at the measured remote read rate") {
			t.Errorf("remote: decision %q, verdict %q", remote.Decision, remote.Verdict)
		}
		if d := l.step("device").Decision; !strings.Contains(d, "reused in the working pool") {
			t.Errorf("pool decision %q", d)
		}
		m := l.Memory
		if m == nil || m.PoolKVBytes == nil || m.PredictedKVBytes == nil || int64(*m.PoolKVBytes) != *m.PredictedKVBytes || *m.PredictedKVBytes != int64(full)*fakeBlockBytes ||
			m.Checkpoints == nil || int(*m.Checkpoints) != m.PredictedCheckpoints || m.PredictedCheckpoints != full/4 || m.RSSBytes == nil {
			t.Errorf("length %d memory %+v", l.Target, m)
		}
		_, remoteCounted := l.TierBlocks["remote"]
		if m.TierBytes["disk"] != int64(full)*fakeBlockBytes || l.StagedTokens == nil || *l.StagedTokens != full*16 || l.TierBlocks["host"] != int64(full) || remoteCounted {
			t.Errorf("staging: tier bytes %v, staged %v, blocks %v", m.TierBytes, l.StagedTokens, l.TierBlocks)
		}
		var rows []string
		for _, c := range m.ByCheckpointBlocks {
			rows = append(rows, fmt.Sprintf("%d:%d:%v", c.N, c.Checkpoints, c.Server))
		}
		if want := fmt.Sprintf("1:%d:false 2:%d:false 4:%d:true 8:%d:false 16:%d:false 64:%d:false", full, full/2, full/4, full/8, full/16, full/64); strings.Join(rows, " ") != want {
			t.Errorf("checkpoints by N: %v, want %s", rows, want)
		}
	}
	if len(lc.Growth) != 1 || math.Abs(lc.Growth[0].LengthRatio-2) > 0.02 || lc.Growth[0].PoolKV == nil || math.Abs(*lc.Growth[0].PoolKV-2) > 0.03 {
		t.Errorf("growth %+v", lc.Growth)
	}
	if rep.Requests != 10 || rep.Errors != 0 || rep.Workload != "longctx" {
		t.Errorf("report: %d requests, %d errors, workload %s", rep.Requests, rep.Errors, rep.Workload)
	}

	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	var back struct {
		LongCtx *struct {
			Lengths []struct {
				Steps []struct {
					Source string `json:"source"`
				} `json:"steps"`
			} `json:"lengths"`
		} `json:"longctx"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	if err := json.Unmarshal(b, &back); err != nil || back.LongCtx == nil || len(back.LongCtx.Lengths[0].Steps) != 5 {
		t.Errorf("report.json longctx: %v %s", err, b[:min(len(b), 300)])
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, want := range []string{`id="longctx-ttft-vs-length"`, `id="longctx-bytes-vs-length"`, "<svg", "TTFT vs prompt length", "Cache bytes vs prompt length",
		`id="longctx-decisions"`, "slower_than_recompute", `id="longctx-checkpoints"`, `id="longctx-growth"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(string(html), "Prices are list prices") {
		t.Error("report.html talks about prices on a longctx run")
	}
	var tb strings.Builder
	if err := rep.WriteTable(&tb); err != nil || !strings.Contains(tb.String(), "TTFT by source") || !strings.Contains(tb.String(), "skipped: longer than the model's context") {
		t.Errorf("table: %v\n%s", err, tb.String())
	}
}

// TestLongCtxWithoutAdminKey: without the admin key only the cold and pool requests run, the
// cache is never dropped, and the report says why.
func TestLongCtxWithoutAdminKey(t *testing.T) {
	f, s := newFakeLongServer(t, 8192, "host")
	cfg := longConfig(s.URL, 1024)
	cfg.AdminKey = ""
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"request from computed", "request from device"}; !slices.Equal(f.calls, want) {
		t.Errorf("calls %v, want %v", f.calls, want)
	}
	lc := rep.LongCtx
	if len(lc.Notes) < 2 || !strings.Contains(lc.Notes[0], "no --admin-key") || len(lc.Lengths[0].Steps) != 2 {
		t.Errorf("notes %q, steps %d", lc.Notes, len(lc.Lengths[0].Steps))
	}
	if st := lc.Lengths[0].Steps[1]; st.From != "device" || st.ServerTokens != nil || st.Decision == "" {
		t.Errorf("pool step without /metrics: %+v", st)
	}
	if m := lc.Lengths[0].Memory; m == nil || m.PoolKVBytes != nil || m.PredictedKVBytes != nil {
		t.Errorf("memory without /metrics or GET /v1/cache: %+v (want nothing measured, not zeros)", m)
	}
}

// TestLongCtxErrors: a refused request is the step's error and counts in the report; a wrong
// admin key fails the run before any request.
func TestLongCtxErrors(t *testing.T) {
	f, s := newFakeLongServer(t, 1500, "host")
	f.card = 1 << 20 // the card says 1M; the server refuses past 1500 tokens
	rep, err := Run(context.Background(), longConfig(s.URL, 2048))
	if err != nil {
		t.Fatal(err)
	}
	l := rep.LongCtx.Lengths[0]
	if len(l.Steps) != 1 || !strings.Contains(l.Steps[0].Error, "HTTP 400") || rep.Errors != 1 || rep.Requests != 1 || l.Memory != nil {
		t.Errorf("refused cold request: steps %+v, errors %d", l.Steps, rep.Errors)
	}
	cfg := longConfig(s.URL, 1024)
	cfg.AdminKey = "wrong"
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("wrong admin key: %v", err)
	}
}

// TestLongTextDeterministic: a length's text depends only on the seed and the length, grows
// by appending, and shares no start with another length's.
func TestLongTextDeterministic(t *testing.T) {
	a, b := newLongText(1, 4096).render(300), newLongText(1, 4096).render(300)
	if a != b {
		t.Error("same seed and length: texts differ")
	}
	if longer := newLongText(1, 4096).render(600); !strings.HasPrefix(longer, strings.TrimSuffix(a, ".")) {
		t.Error("a longer render does not extend the shorter one")
	}
	if c := newLongText(1, 8192).render(300); firstWords(c)[20:] == firstWords(a)[20:] {
		t.Error("two lengths start with the same words")
	}
	if d := newLongText(2, 4096).render(300); d == a {
		t.Error("different seeds: same text")
	}
}

// TestParseSeries: every counter and gauge sample by name and sorted labels; histograms left
// out; delta by one label.
func TestParseSeries(t *testing.T) {
	in := `# TYPE a_total counter
a_total{tier="host"} 3
a_total{tier="disk"} 5
# TYPE g gauge
g{z="1",b="2"} 7
# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf"} 1
h_sum 0.5
h_count 1
plain 9
`
	s, err := parseSeries(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if s[`a_total{tier="host"}`] != 3 || s[`g{b="2",z="1"}`] != 7 || s["plain"] != 9 {
		t.Errorf("series %v", s)
	}
	for k := range s {
		if strings.HasPrefix(k, "h") {
			t.Errorf("histogram sample %s kept", k)
		}
	}
	before := series{`a_total{tier="host"}`: 1}
	if d := s.delta(before, "a_total", "tier"); d["host"] != 2 || d["disk"] != 5 || len(d) != 2 {
		t.Errorf("delta %v", d)
	}
	if d := s.delta(before, "missing_total", "tier"); d != nil {
		t.Errorf("delta of an absent counter: %v, want nil", d)
	}
}

// TestLongCtxRemoteReadFails: a remote read that fails restores and discards nothing; the step
// says the prefix was there but not used, and quotes the failed calls.
func TestLongCtxRemoteReadFails(t *testing.T) {
	noQuietPause(t)
	f, s := newFakeLongServer(t, 8192, "host", "remote")
	f.failRemote = true
	rep, err := Run(context.Background(), longConfig(s.URL, 1000))
	if err != nil {
		t.Fatal(err)
	}
	st := rep.LongCtx.Lengths[0].step("remote")
	if st == nil || st.From != "computed" || st.RemoteFailedCalls == nil || *st.RemoteFailedCalls != 1 {
		t.Fatalf("remote step %+v", st)
	}
	if !strings.Contains(st.Decision, "nothing restored from remote") || !strings.Contains(st.Decision, "1 remote calls failed") ||
		!strings.HasPrefix(st.Verdict, "missed: TTFT") {
		t.Errorf("decision %q, verdict %q", st.Decision, st.Verdict)
	}
	if h := rep.LongCtx.Lengths[0].step("host"); h.RemoteFailedCalls == nil || *h.RemoteFailedCalls != 0 {
		t.Errorf("host step remote failed calls %v, want 0", h.RemoteFailedCalls)
	}
}
