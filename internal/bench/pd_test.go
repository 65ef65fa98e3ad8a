package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"
)

func msd(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestITLs(t *testing.T) {
	for _, tc := range []struct {
		arrivals []time.Duration
		tokens   []int
		want     []float64
	}{
		{nil, nil, nil},
		{msd(10), []int{1}, nil}, // one chunk: its wait is the TTFT, no gap
		{msd(10, 15, 35), []int{1, 1, 1}, []float64{5, 20}},
		{msd(10, 30), []int{1, 4}, []float64{5, 5, 5, 5}}, // a chunk of 4 tokens: 4 gaps of a quarter
		{msd(10, 12, 14), nil, []float64{2, 2}},           // no token counts: one token a chunk
	} {
		got := itls(tc.arrivals, tc.tokens)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("itls(%v, %v) = %v, want %v", tc.arrivals, tc.tokens, got, tc.want)
		}
	}
}

func TestSLOAndStats(t *testing.T) {
	slo := SLO{TTFT: 100 * time.Millisecond, ITL: 10 * time.Millisecond}
	steady := &pdSample{Kind: "stream", TTFT: 50 * time.Millisecond, Arrivals: msd(50, 55, 60, 65), Tokens: []int{1, 1, 1, 1}, CompletionTokens: 4}
	stalled := &pdSample{Kind: "stream", TTFT: 50 * time.Millisecond, Arrivals: msd(50, 55, 300, 305), Tokens: []int{1, 1, 1, 1}, CompletionTokens: 4}
	slowLong := &pdSample{Kind: "long", TTFT: 500 * time.Millisecond, Arrivals: msd(500, 505), Tokens: []int{1, 1}, CompletionTokens: 2, TransferTokens: 2048}
	oneToken := &pdSample{Kind: "long", TTFT: 80 * time.Millisecond, Arrivals: msd(80), Tokens: []int{1}, CompletionTokens: 1}
	failed := &pdSample{Kind: "stream", Err: "HTTP 503"}
	for _, tc := range []struct {
		s    *pdSample
		want bool
	}{{steady, true}, {stalled, false}, {slowLong, false}, {oneToken, true}, {failed, false}} {
		if got := slo.meets(tc.s); got != tc.want {
			t.Errorf("meets(%+v) = %v, want %v", tc.s, got, tc.want)
		}
	}
	st := pdStats([]*pdSample{steady, stalled, slowLong, oneToken, failed}, slo, 2*time.Second)
	if st.Requests != 5 || st.Errors != 1 || st.TransferTokens != 2048 {
		t.Errorf("requests %d errors %d transfer %d, want 5 1 2048", st.Requests, st.Errors, st.TransferTokens)
	}
	if st.Goodput == nil || *st.Goodput != 2.0/5 || *st.GoodputStreams != 1.0/3 || *st.GoodputLong != 0.5 {
		t.Errorf("goodput %v streams %v long %v, want 0.4, 1/3, 0.5", fracStr(st.Goodput), fracStr(st.GoodputStreams), fracStr(st.GoodputLong))
	}
	if st.TTFT.Count != 4 || st.TTFTStreams.Count != 2 || st.TTFTLong.Count != 2 || st.ITL.Count != 7 || st.ITLStreams.Count != 6 {
		t.Errorf("counts: ttft %d streams %d long %d itl %d itl streams %d", st.TTFT.Count, st.TTFTStreams.Count, st.TTFTLong.Count, st.ITL.Count, st.ITLStreams.Count)
	}
	if st.OutputTokensPerS != 11.0/2 {
		t.Errorf("output tok/s %v, want 5.5", st.OutputTokensPerS)
	}
	empty := pdStats(nil, slo, 0)
	if empty.Goodput != nil || empty.TTFT != nil || empty.ITL != nil {
		t.Errorf("no samples: %+v, want nil goodput and percentiles", empty)
	}
}

func TestParsePrefillAnswer(t *testing.T) {
	good := `{"id":"x","choices":[{"text":"a"}],"usage":{"prompt_tokens":9,"timings":{"prefill_ms":12.5}},
		"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"xfer-1","remote_host":"127.0.0.1","remote_port":8080}}`
	a, err := parsePrefillAnswer([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	var kv map[string]any
	if err := json.Unmarshal(a.KV, &kv); err != nil || kv["remote_request_id"] != "xfer-1" {
		t.Errorf("kv %s (%v)", a.KV, err)
	}
	if a.Timings == nil || a.Timings.PrefillMs != 12.5 {
		t.Errorf("timings %+v", a.Timings)
	}
	for _, bad := range []string{`{"choices":[]}`, `{"kv_transfer_params":null}`, `{"kv_transfer_params":[1]}`, `not json`} {
		if _, err := parsePrefillAnswer([]byte(bad)); err == nil {
			t.Errorf("parsePrefillAnswer(%s): no error", bad)
		}
	}
}

func TestHandoffRequests(t *testing.T) {
	body := map[string]any{"prompt": "p", "max_tokens": 128, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	p := prefillRequest(body)
	kv, _ := p["kv_transfer_params"].(map[string]any)
	if p["stream"] != false || p["max_tokens"] != 1 || kv["do_remote_decode"] != true || kv["do_remote_prefill"] != false || p["stream_options"] != nil {
		t.Errorf("prefill request %v", p)
	}
	d := decodeRequest(body, json.RawMessage(`{"do_remote_prefill":true}`))
	if d["max_tokens"] != 128 || d["stream"] != true || string(d["kv_transfer_params"].(json.RawMessage)) != `{"do_remote_prefill":true}` {
		t.Errorf("decode request %v", d)
	}
	if _, ok := body["kv_transfer_params"]; ok || body["max_tokens"] != 128 {
		t.Errorf("the original body changed: %v", body)
	}
}

func TestReadTokenStream(t *testing.T) {
	stream := strings.Join([]string{
		`data: {"choices":[{"text":"a","token_ids":[5]}]}`,
		``,
		`data: {"choices":[{"text":"bc","token_ids":[6,7]}]}`,
		`data: {"choices":[{"text":"","finish_reason":"length"}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"cache":{"transfer_tokens":16},"timings":{"restore_ms":1.5}}}`,
		`data: [DONE]`, ``}, "\n")
	var got []int
	u, err := readTokenStream(strings.NewReader(stream), func(n int) { got = append(got, n) })
	if err != nil || fmt.Sprint(got) != "[1 2]" || u == nil || u.CompletionTokens != 3 || u.Cache.TransferTokens != 16 || u.Timings.RestoreMs != 1.5 {
		t.Errorf("tokens %v usage %+v err %v", got, u, err)
	}
	if _, err := readTokenStream(strings.NewReader("data: {\"choices\":[{\"text\":\"a\"}]}\n"), func(int) {}); err == nil {
		t.Error("a stream without [DONE]: no error")
	}
	if _, err := readTokenStream(strings.NewReader("data: {\"error\":{\"message\":\"boom\"}}\n"), func(int) {}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("error chunk: %v", err)
	}
}

func TestParsePullCounters(t *testing.T) {
	text := `# TYPE stockpot_kv_transfer_bytes_total counter
stockpot_kv_transfer_bytes_total{direction="pulled"} 4096
stockpot_kv_transfer_bytes_total{direction="served"} 99
# TYPE stockpot_kv_transfer_seconds histogram
stockpot_kv_transfer_seconds_bucket{direction="pulled",le="0.001"} 1
stockpot_kv_transfer_seconds_bucket{direction="pulled",le="+Inf"} 2
stockpot_kv_transfer_seconds_sum{direction="pulled"} 0.25
stockpot_kv_transfer_seconds_count{direction="pulled"} 2
stockpot_kv_transfer_seconds_bucket{direction="served",le="+Inf"} 7
stockpot_kv_transfer_seconds_sum{direction="served"} 9
stockpot_kv_transfer_seconds_count{direction="served"} 7
`
	c, ok, err := parsePullCounters(strings.NewReader(text))
	if err != nil || !ok || c.Bytes != 4096 || c.Seconds != 0.25 || c.Pulls != 2 {
		t.Errorf("%+v ok %v err %v", c, ok, err)
	}
	if _, ok, err := parsePullCounters(strings.NewReader("# TYPE other counter\nother 1\n")); ok || err != nil {
		t.Errorf("no transfer metrics: ok %v err %v", ok, err)
	}
}

// TestPDReportRenders: a report with every part, and one with missing numbers, print a table,
// an HTML page and a PNG of the expected shape.
func TestPDReportRenders(t *testing.T) {
	slo := SLO{TTFT: time.Second, ITL: 50 * time.Millisecond}
	s := &pdSample{Kind: "stream", TTFT: 20 * time.Millisecond, Arrivals: msd(20, 25, 30), Tokens: []int{1, 1, 1}, CompletionTokens: 3}
	l := &pdSample{Kind: "long", TTFT: 900 * time.Millisecond, Arrivals: msd(900, 910), Tokens: []int{1, 1}, CompletionTokens: 2}
	pull, bytes_, gbps, mc, rest := 12.0, float64(64<<20), 5.6, 20.0, 30.0
	n := 2032
	full := &PDReport{Machine: PDMachine{CPU: "test CPU", Cores: 2},
		Topologies: []PDTopology{{Name: "pd", PDLoadStats: pdStats([]*pdSample{s, l}, slo, time.Second), ITLSeries: [][2]float64{{0.1, 5}, {0.2, 5}}, TTFTAll: []float64{20, 900}},
			{Name: "both", PDLoadStats: pdStats([]*pdSample{s}, slo, time.Second), ITLSeries: [][2]float64{{0.1, 5}}, TTFTAll: []float64{20}}},
		Handoff: []PDHandoff{{Model: "m", PromptTokens: 2048, TTFTMs: 1000, PrefillMs: 950, PullMs: &pull, DecodeFirstMs: 38, PulledBytes: &bytes_,
			PullGBps: &gbps, MemcpyGBps: &mc, StoreRestoreMs: &rest, StoreTokens: &n}}}
	sparse := &PDReport{Handoff: []PDHandoff{{Model: "m", PromptTokens: 100, Err: "boom"}}}
	for name, r := range map[string]*PDReport{"full": full, "sparse": sparse, "empty": {}} {
		var tab bytes.Buffer
		if err := r.WriteTable(&tab); err != nil {
			t.Fatalf("%s: table: %v", name, err)
		}
		page, err := r.HTML()
		if err != nil {
			t.Fatalf("%s: html: %v", name, err)
		}
		img, err := r.PNG()
		if err != nil {
			t.Fatalf("%s: png: %v", name, err)
		}
		if _, err := png.Decode(bytes.NewReader(img)); err != nil {
			t.Fatalf("%s: png does not decode: %v", name, err)
		}
		for _, id := range []string{`id="pd-itl-cdf"`, `id="pd-ttft"`, `id="pd-handoff-split"`} {
			if !bytes.Contains(page, []byte(id)) {
				t.Errorf("%s: page lacks %s", name, id)
			}
		}
		if name == "full" {
			for _, want := range []string{"| pd |", "| both |", "| 2048 | 1000 | 950 | 12.0 | 38.0 | 1.2% | 64.0 | 5.6 | 20.0 | 0.28× | 30.0 | 2.50× | 2032 |"} {
				if !strings.Contains(tab.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, tab.String())
				}
			}
		}
		if name == "sparse" && !strings.Contains(tab.String(), "error: boom") {
			t.Errorf("sparse table:\n%s", tab.String())
		}
	}
}
