package bench

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestEstimateCost: without breakpoints every prompt token is input; with them reads, writes
// by TTL and the rest each at their price.
func TestEstimateCost(t *testing.T) {
	p := Price{Name: "x", AsOf: "now", Input: 3, CacheRead: 0.3, CacheWrite5m: 3.75, CacheWrite1h: 6, Output: 15}
	tk := costTokens(1_000_000, 600_000, 200_000, 100_000, 10_000)
	if tk.Uncached != 100_000 {
		t.Fatalf("split %+v: want 100k uncached", tk)
	}
	c := estimateCost(p, tk)
	with := 0.6*0.3 + 0.2*3.75 + 0.1*6 + 0.1*3 + 0.01*15
	without := 3 + 0.01*15
	if !near(c.WithBreakpoints, with) || !near(c.WithoutBreakpoints, without) || !near(c.Saving, 1-with/without) ||
		c.WithCache != c.WithBreakpoints || c.WithoutCache != c.WithoutBreakpoints {
		t.Errorf("have %+v, want with %v without %v", c, with, without)
	}
	// Writes that no read repays cost more than no cache at all: a negative saving.
	if c := estimateCost(p, costTokens(100, 0, 100, 0, 0)); !(c.Saving < 0) {
		t.Errorf("all writes: saving %v, want negative", c.Saving)
	}
	// Reported counts over the prompt are clamped, never priced twice.
	if tk := costTokens(100, 80, 50, 50, 0); tk.CacheRead != 80 || tk.CacheWrite5m != 20 || tk.CacheWrite1h != 0 || tk.Uncached != 0 {
		t.Errorf("clamped split %+v", tk)
	}
}

func TestParsePrices(t *testing.T) {
	want := []Price{{Name: "a", AsOf: "2026", Input: 2, CacheRead: 0.2, CacheWrite5m: 2.5, CacheWrite1h: 4, Output: 8},
		{Name: "b", Input: 1, CacheRead: 1, CacheWrite5m: 1.5, CacheWrite1h: 1.5, Output: 3}}
	for _, c := range []struct {
		name string
		yaml bool
		in   string
	}{
		{"json list", false, `[{"name":"a","as_of":"2026","input":2,"cache_read":0.2,"cache_write_5m":2.5,"cache_write_1h":4,"output":8},
			{"name":"b","input":1,"cache_write":1.5,"output":3}]`},
		{"json object", false, `{"note":"x","prices":[{"name":"a","as_of":"2026","input":2,"cache_read":0.2,"cache_write_5m":2.5,"cache_write_1h":4,"output":8},
			{"name":"b","input":1,"cache_write":1.5,"output":3}]}`},
		{"yaml list", true, "# prices\n- name: a\n  as_of: \"2026\"\n  input: 2\n  cache_read: 0.2\n  cache_write_5m: 2.5\n  cache_write_1h: 4\n  output: 8\n- {name: b, input: 1, cache_write: 1.5, output: 3}\n"},
		{"yaml object", true, "note: x\nprices:\n  - {name: a, as_of: \"2026\", input: 2, cache_read: 0.2, cache_write_5m: 2.5, cache_write_1h: 4, output: 8}\n  - {name: b, input: 1, cache_write: 1.5, output: 3}\n"},
	} {
		have, err := ParsePrices([]byte(c.in), c.yaml)
		if err != nil || !reflect.DeepEqual(have, want) {
			t.Errorf("%s: have %+v, %v; want %+v", c.name, have, err, want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{``, "empty"},
		{`[]`, "no prices"},
		{`{"prices":[]}`, "no prices"},
		{`[{"input":1,"output":1}]`, "name"},
		{`[{"name":"a","output":1}]`, "input and output"},
		{`[{"name":"a","input":1,"output":1,"cache_read":-1}]`, ">= 0"},
		{`{"prices":`, "want a list"},
		{`7`, "want a list"},
	} {
		if _, err := ParsePrices([]byte(c.in), false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: have %v, want an error saying %q", c.in, err, c.want)
		}
	}
}

// TestExamplePrices: the shipped example file parses, names its sources, and is the built-in
// table.
func TestExamplePrices(t *testing.T) {
	ps, err := LoadPrices("../../bench/prices.example.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ps, DefaultPrices) {
		t.Errorf("bench/prices.example.json and DefaultPrices differ:\n%+v\n%+v", ps, DefaultPrices)
	}
	providers := map[string]bool{}
	for _, p := range ps {
		providers[strings.Split(p.Name, "/")[0]] = true
		if p.Source == "" || p.AsOf == "" {
			t.Errorf("%s: no source or date", p.Name)
		}
	}
	for _, want := range []string{"anthropic", "openai", "deepseek", "google"} {
		if !providers[want] {
			t.Errorf("no %s prices in the example", want)
		}
	}
}

// anthropicStream is a /v1/messages stream as serve (and Anthropic) send it.
const anthropicStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"cache_read_input_tokens":64,"cache_creation_input_tokens":48,"cache_creation":{"ephemeral_5m_input_tokens":16,"ephemeral_1h_input_tokens":32},"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// TestAnthropicUsage: a /v1/messages stream yields the cache split, the prompt as input +
// reads + writes, the text and its TTFT; the report then prices reads and writes apart.
func TestAnthropicUsage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, anthropicStream)
	}))
	defer srv.Close()
	tgt := &target{base: srv.URL, model: "m", blockSize: 16, http: srv.Client()}
	var s Sample
	tgt.send(context.Background(), "/v1/messages", map[string]any{"messages": []any{}}, time.Now(), &s)
	if !s.OK || s.OutputText != "Hi there" || s.FirstToken == 0 || s.FinishReason != "end_turn" {
		t.Fatalf("sample %+v", s)
	}
	if want := (CacheSplit{Read: 64, Write5m: 16, Write1h: 32, Input: 10}); s.CacheSplit == nil || *s.CacheSplit != want {
		t.Errorf("split %+v, want %+v", s.CacheSplit, want)
	}
	if s.PromptTokens != 122 || s.CachedTokens == nil || *s.CachedTokens != 64 || s.CompletionTokens != 2 {
		t.Errorf("usage: prompt %d cached %v completion %d", s.PromptTokens, s.CachedTokens, s.CompletionTokens)
	}

	cfg := DefaultConfig()
	cfg.Prices = []Price{{Name: "p", Input: 1, CacheRead: 0.1, CacheWrite5m: 1.25, CacheWrite1h: 2, Output: 5}}
	s.Start, s.End = 0, time.Second
	rep := summarizeRun(&runResult{cfg: cfg, tgt: tgt, samples: []Sample{s, s}, wall: time.Second})
	want := CostTokens{Prompt: 244, CacheRead: 128, CacheWrite5m: 32, CacheWrite1h: 64, Uncached: 20, Output: 4}
	if rep.CostTokens != want || !strings.Contains(rep.CostBasis, "cache_creation") {
		t.Errorf("cost tokens %+v (%s), want %+v", rep.CostTokens, rep.CostBasis, want)
	}
	if c := rep.Cost[0]; !near(c.WithBreakpoints, (128*0.1+32*1.25+64*2+20*1+4*5)*1e-6) || !near(c.WithoutBreakpoints, (244+4*5)*1e-6) {
		t.Errorf("cost %+v", c)
	}
	// Without Anthropic usage: cached_tokens are reads, and nothing is a write.
	o := s
	o.CacheSplit = nil
	rep = summarizeRun(&runResult{cfg: cfg, tgt: tgt, samples: []Sample{o}, wall: time.Second})
	if want := (CostTokens{Prompt: 122, CacheRead: 64, Uncached: 58, Output: 2}); rep.CostTokens != want {
		t.Errorf("openai-style cost tokens %+v, want %+v", rep.CostTokens, want)
	}
	html, err := rep.HTML()
	if err != nil || !strings.Contains(string(html), "with breakpoints") {
		t.Errorf("report.html lacks the cost with breakpoints: %v", err)
	}
}

// FuzzParsePrices: a prices file is outside bytes; any input parses to valid prices or fails
// with an error, in both syntaxes.
func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{
		`[{"name":"a","input":1,"output":2}]`,
		`{"prices":[{"name":"a","input":1,"cache_read":0.1,"cache_write_5m":1.25,"cache_write_1h":2,"output":2}]}`,
		"- {name: a, input: 1, output: 2, cache_write: 1.25}\n",
		"prices:\n  - name: b\n    input: .5\n    output: 1e3\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, isYAML bool) {
		ps, err := ParsePrices(b, isYAML)
		if err != nil {
			return
		}
		if len(ps) == 0 {
			t.Fatal("no prices and no error")
		}
		for _, p := range ps {
			for _, v := range []float64{p.Input, p.CacheRead, p.CacheWrite5m, p.CacheWrite1h, p.Output} {
				if !(v >= 0) || math.IsInf(v, 0) {
					t.Fatalf("price %v accepted in %+v", v, p)
				}
			}
			if p.Name == "" {
				t.Fatal("a price without a name accepted")
			}
		}
	})
}
