package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
)

const testModel = "test-model"

func newTestServer(t testing.TB, gen *fakeGen, mod func(*Config)) (*Server, *prometheus.Registry) {
	t.Helper()
	return newTestServerTok(t, gen, fakeTok{}, mod)
}

func newTestServerTok(t testing.TB, gen *fakeGen, tok pipeline.Tokenizer, mod func(*Config)) (*Server, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ModelName = testModel
	cfg.Fingerprint = "fp-123"
	cfg.ContextLength = 128
	cfg.MaxPromptTokens = 100
	cfg.MaxBodyBytes = 4096
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	s, err := New(cfg, gen, tok, reg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func do(h http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decoding %q: %v", rec.Body.String(), err)
	}
	return v
}

func TestCompletion(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("hello world"), nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"model":"test-model","prompt":"abc","max_tokens":5,"temperature":0,"seed":3,"top_k":-1,"cache_salt":"t"}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	resp := decode[api.CompletionResponse](t, rec)
	if resp.Object != "text_completion" || !strings.HasPrefix(resp.ID, "cmpl-") || resp.Model != testModel || resp.SystemFingerprint != "fp-123" {
		t.Errorf("envelope: %+v", resp)
	}
	c := resp.Choices[0]
	if c.Text != "hello" || *c.FinishReason != "length" || c.Logprobs != nil || c.TokenIDs != nil || resp.PromptTokenIDs != nil {
		t.Errorf("choice: %+v", c)
	}
	u := resp.Usage
	want := usageOf(fakeUsage(4)) // BOS + "abc"
	want.CompletionTokens, want.TotalTokens = 5, 9
	if u == nil || *u != *want {
		t.Errorf("usage\nhave %+v\nwant %+v", u, want)
	}
	if u.PromptTokensDetails.CachedTokens+u.Cache.ComputedTokens != u.PromptTokens {
		t.Errorf("cached + computed != prompt: %+v", u)
	}
	// The raw JSON always has cached_tokens, cache and timings.
	for _, k := range []string{`"cached_tokens":`, `"cache":{"device_tokens":`, `"timings":{"queue_ms":0.25`, `"logprobs":null`} {
		if !strings.Contains(rec.Body.String(), k) {
			t.Errorf("body lacks %s: %s", k, rec.Body)
		}
	}
	r := s.gen.(*fakeGen).lastRequest()
	if r.Sampling.Temperature != 0 || !r.Sampling.HasSeed || r.Sampling.Seed != 3 || r.Sampling.TopK != 0 || r.CacheSalt != "t" || r.MaxTokens != 5 {
		t.Errorf("engine request: %+v", r)
	}
}

func TestCompletionDefaultsAndEOS(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("hi"), nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x"}`)
	resp := decode[api.CompletionResponse](t, rec)
	if resp.Choices[0].Text != "hi" || *resp.Choices[0].FinishReason != "stop" || resp.Usage.CompletionTokens != 3 {
		t.Errorf("have %+v usage %+v", resp.Choices[0], resp.Usage)
	}
	if r := s.gen.(*fakeGen).lastRequest(); r.MaxTokens != api.DefaultCompletionMaxTokens || r.Sampling.Temperature != 1 || r.Sampling.HasSeed {
		t.Errorf("defaults: %+v", r)
	}
}

func TestStopTokenIDsAndIgnoreEOS(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ab;cd"), nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stop_token_ids":[61]}`) // ';' = 59+2
	resp := decode[api.CompletionResponse](t, rec)
	if resp.Choices[0].Text != "ab" || *resp.Choices[0].FinishReason != "stop" || resp.Usage.CompletionTokens != 3 {
		t.Errorf("stop token: %+v %+v", resp.Choices[0], resp.Usage)
	}
	rec = do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","ignore_eos":true,"max_tokens":8}`)
	resp = decode[api.CompletionResponse](t, rec)
	if resp.Choices[0].Text != "ab;cdab" || *resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 8 {
		t.Errorf("ignore_eos: %+v %+v", resp.Choices[0], resp.Usage)
	}
}

func TestReturnTokenIDs(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":[[5,6,7]],"return_token_ids":true}`)
	resp := decode[api.CompletionResponse](t, rec)
	if fmt.Sprint(resp.PromptTokenIDs) != "[5 6 7]" || fmt.Sprint(resp.Choices[0].TokenIDs) != fmt.Sprint([]int32{'o' + 2, 'k' + 2, fakeEOS}) {
		t.Errorf("ids: %+v", resp)
	}
	if resp.Usage.PromptTokens != 3 {
		t.Errorf("token prompt should get no BOS: %+v", resp.Usage)
	}
	rec = do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"}],"return_token_ids":true}`)
	chat := decode[api.ChatCompletionResponse](t, rec)
	if len(chat.PromptTokenIDs) != chat.Usage.PromptTokens || len(chat.Choices[0].TokenIDs) != chat.Usage.CompletionTokens {
		t.Errorf("chat ids: %+v", chat)
	}
}

// TestBadRequests sends every kind of bad input and checks status, OpenAI error shape and that
// the server keeps serving.
func TestBadRequests(t *testing.T) {
	gen := newFakeGen("fine")
	s, reg := newTestServer(t, gen, nil)
	long := strings.Repeat("a", 100) // 101 tokens with BOS: over MaxPromptTokens=100
	ids := make([]string, 130)
	for i := range ids {
		ids[i] = "5"
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		typ, code, msg           string
	}{
		{"malformed", "POST", "/v1/completions", `{"prompt":`, 400, "invalid_request_error", "invalid_value", "malformed JSON"},
		{"not object", "POST", "/v1/completions", `[1]`, 400, "invalid_request_error", "invalid_value", "JSON object"},
		{"wrong type", "POST", "/v1/completions", `{"prompt":"x","max_tokens":"5"}`, 400, "invalid_request_error", "invalid_value", `"max_tokens"`},
		{"negative max", "POST", "/v1/completions", `{"prompt":"x","max_tokens":-5}`, 400, "invalid_request_error", "invalid_value", "at least 1"},
		{"absurd max", "POST", "/v1/completions", `{"prompt":"x","max_tokens":1000000}`, 400, "invalid_request_error", "invalid_value", "context length of 128"},
		{"temperature", "POST", "/v1/completions", `{"prompt":"x","temperature":3}`, 400, "invalid_request_error", "invalid_value", "temperature"},
		{"vocab", "POST", "/v1/completions", `{"prompt":[5,999]}`, 400, "invalid_request_error", "invalid_value", "token id 999 at position 1 is outside the vocabulary (size 258)"},
		{"stop token vocab", "POST", "/v1/completions", `{"prompt":"x","stop_token_ids":[300]}`, 400, "invalid_request_error", "invalid_value", "outside the vocabulary"},
		{"empty prompt", "POST", "/v1/completions", `{"prompt":""}`, 400, "invalid_request_error", "invalid_value", "empty"},
		{"no prompt", "POST", "/v1/completions", `{}`, 400, "invalid_request_error", "invalid_value", "required"},
		{"max prompt", "POST", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "invalid_request_error", "invalid_value", "101 tokens, over this server's limit of 100"},
		{"context", "POST", "/v1/completions", `{"prompt":[` + strings.Join(ids, ",") + `]}`, 400, "invalid_request_error", "invalid_value", "130 tokens, but the model's context length is 128"},
		{"n", "POST", "/v1/completions", `{"prompt":"x","n":2}`, 400, "invalid_request_error", "unsupported_parameter", "n=2"},
		{"echo", "POST", "/v1/completions", `{"prompt":"x","echo":true}`, 400, "invalid_request_error", "unsupported_parameter", "echo"},
		{"model", "POST", "/v1/completions", `{"prompt":"x","model":"gpt-4"}`, 404, "invalid_request_error", "model_not_found", "gpt-4"},
		{"chat model", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"model":"other"}`, 404, "invalid_request_error", "model_not_found", "other"},
		{"chat role", "POST", "/v1/chat/completions", `{"messages":[{"role":"function","content":"x"}]}`, 400, "invalid_request_error", "unsupported_parameter", "role"},
		{"chat template", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"TEMPLATE_ERROR"}]}`, 400, "invalid_request_error", "invalid_value", "roles must alternate"},
		{"chat messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_request_error", "invalid_value", "messages"},
		{"too large", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "invalid_request_error", "request_too_large", "4096"},
		{"unknown route", "GET", "/v2/nothing", ``, 404, "not_found_error", "not_found", "/v2/nothing"},
		{"wrong method", "GET", "/v1/completions", ``, 405, "invalid_request_error", "method_not_allowed", "POST"},
		{"wrong method models", "POST", "/v1/models", `{}`, 405, "invalid_request_error", "method_not_allowed", "GET"},
		{"unknown model card", "GET", "/v1/models/nope", ``, 404, "invalid_request_error", "model_not_found", "nope"},
		{"panic", "POST", "/v1/completions", `{"prompt":"x","cache_salt":"panic"}`, 500, "server_error", "internal_error", "recovered panic"},
		{"detokenize vocab", "POST", "/detokenize", `{"tokens":[1,9999]}`, 400, "invalid_request_error", "invalid_value", "9999"},
		{"detokenize missing", "POST", "/detokenize", `{}`, 400, "invalid_request_error", "invalid_value", "tokens"},
		{"tokenize wrong type", "POST", "/tokenize", `{"prompt":5}`, 400, "invalid_request_error", "invalid_value", `"prompt"`},
	} {
		rec := do(s.Handler(), tc.method, tc.path, tc.body)
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, rec.Code, tc.status, rec.Body)
			continue
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: content type %q", tc.name, ct)
		}
		var body struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Errorf("%s: not JSON: %s", tc.name, rec.Body)
			continue
		}
		e := body.Error
		if e.Type != tc.typ || e.Code == nil || *e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: have type %q code %v message %q; want %q %q containing %q", tc.name, e.Type, e.Code, e.Message, tc.typ, tc.code, tc.msg)
		}
	}
	// Still serving.
	if rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x"}`); rec.Code != 200 {
		t.Fatalf("server stopped serving: %d %s", rec.Code, rec.Body)
	}
	if got := counterValue(t, reg, "stockpot_requests_total", "status", "400"); got < 10 {
		t.Errorf("requests_total{status=400} = %v", got)
	}
}

func TestEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("bad sampling: %w", engine.ErrInvalid), 400},
		{fmt.Errorf("%w: 5000 > 4096", engine.ErrPromptTooLong), 400},
		{engine.ErrShutdown, 503},
		{errors.New("kernel exploded"), 500},
	} {
		gen := newFakeGen("x")
		gen.genErr = tc.err
		s, _ := newTestServer(t, gen, nil)
		for _, body := range []string{`{"prompt":"x"}`, `{"prompt":"x","stream":true}`} {
			rec := do(s.Handler(), "POST", "/v1/completions", body)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), `"error"`) {
				t.Errorf("%v %s: status %d body %s, want %d", tc.err, body, rec.Code, rec.Body, tc.status)
			}
		}
	}
	// An error mid-stream arrives as an error event, then [DONE].
	gen := newFakeGen("abc")
	gen.block, gen.streamErr = true, errors.New("device lost")
	s, _ := newTestServer(t, gen, nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stream":true}`)
	events := sseEvents(t, rec.Body.String())
	if len(events) < 2 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], "device lost") {
		t.Errorf("mid-stream error events: %q", events)
	}
	rec = do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x"}`)
	if rec.Code != 500 {
		t.Errorf("mid-generation engine error: %d %s", rec.Code, rec.Body)
	}
}

func TestAuth(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.APIKeys = []string{"k1", "", "k2"} })
	h := s.Handler()
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/v1/models", "", 401},
		{"/v1/models", "Bearer nope", 401},
		{"/v1/models", "Basic k1", 401},
		{"/v1/models", "Bearer k1", 200},
		{"/v1/models", "bearer k2", 200},
		{"/health", "", 200},
		{"/metrics", "", 403}, // keys are configured, none grants /metrics (endpoint_auth_test.go)
	} {
		rec := do(h, "GET", tc.path, "", "Authorization", tc.auth)
		if rec.Code != tc.status {
			t.Errorf("%s %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.status)
		}
		if tc.status == 401 && !strings.Contains(rec.Body.String(), `"authentication_error"`) {
			t.Errorf("401 body: %s", rec.Body)
		}
	}
	// Anthropic clients send the key as x-api-key.
	for key, status := range map[string]int{"k1": 200, "k2": 200, "nope": 401, "": 401} {
		if rec := do(h, "GET", "/v1/models", "", "X-Api-Key", key); rec.Code != status {
			t.Errorf("x-api-key %q: %d, want %d", key, rec.Code, status)
		}
	}
}

// TestMetricsKey: with a metrics key, /metrics needs it as a bearer token (an API key gets a
// 403); /health stays open.
func TestMetricsKey(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.APIKeys = []string{"api"}; c.MetricsKey = "scrape" })
	h := s.Handler()
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/metrics", "", 401},
		{"/metrics", "Bearer api", 403},
		{"/metrics", "Bearer scrapes", 401},
		{"/metrics", "Bearer scrape", 200},
		{"/health", "", 200},
		{"/v1/models", "Bearer scrape", 403},
		{"/v1/models", "Bearer api", 200},
	} {
		rec := do(h, "GET", tc.path, "", "Authorization", tc.auth)
		if rec.Code != tc.status {
			t.Errorf("%s %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.status)
		}
		if tc.status == 401 && !strings.Contains(rec.Body.String(), `"authentication_error"`) {
			t.Errorf("401 body: %s", rec.Body)
		}
	}
}

// sseEvents checks the framing (every event is one "data: " line followed by a blank line)
// and returns the payloads.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Errorf("stream does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		p, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(p, "\n") {
			t.Errorf("bad SSE event %q", ev)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestStreamCompletion(t *testing.T) {
	gen := newFakeGen("héllo wörld")
	gen.perOutput = 3
	s, _ := newTestServer(t, gen, nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":50}`)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	events := sseEvents(t, rec.Body.String())
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	var text strings.Builder
	var finish string
	var usage *api.Usage
	for i, ev := range events[:len(events)-1] {
		var c api.CompletionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			if i != len(events)-2 || len(c.Choices) != 0 {
				t.Errorf("usage chunk must be last, with no choices: %s", ev)
			}
			usage = c.Usage
			continue
		}
		if finish != "" {
			t.Errorf("chunk after the finish: %s", ev)
		}
		text.WriteString(c.Choices[0].Text)
		if !json.Valid([]byte(ev)) || !strings.Contains(ev, `"finish_reason":`) {
			t.Errorf("chunk %s", ev)
		}
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if text.String() != "héllo wörld" || finish != "stop" {
		t.Errorf("text %q finish %q", text.String(), finish)
	}
	if usage == nil || usage.CompletionTokens != len("héllo wörld")+1 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
		t.Errorf("usage %+v", usage)
	}
	// Without include_usage there is no usage chunk.
	rec = do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stream":true}`)
	if strings.Contains(rec.Body.String(), `"usage"`) {
		t.Errorf("usage without include_usage: %s", rec.Body)
	}
}

func TestStopStringAcrossChunks(t *testing.T) {
	for _, per := range []int{1, 2, 5} {
		gen := newFakeGen("hello world, stop here")
		gen.perOutput = per
		s, _ := newTestServer(t, gen, nil)
		rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stream":true,"stop":["zzz","wor"],"stream_options":{"include_usage":true},"return_token_ids":true}`)
		var text strings.Builder
		var usage *api.Usage
		var ids []int32
		for _, ev := range sseEvents(t, rec.Body.String()) {
			if ev == "[DONE]" {
				continue
			}
			var c api.CompletionResponse
			_ = json.Unmarshal([]byte(ev), &c)
			if c.Usage != nil {
				usage = c.Usage
				continue
			}
			if strings.Contains(c.Choices[0].Text, "w") {
				t.Errorf("per=%d: a possible stop prefix was streamed: %q", per, c.Choices[0].Text)
			}
			text.WriteString(c.Choices[0].Text)
			ids = append(ids, c.Choices[0].TokenIDs...)
			if f := c.Choices[0].FinishReason; f != nil && *f != "stop" {
				t.Errorf("finish %q", *f)
			}
		}
		if text.String() != "hello " {
			t.Errorf("per=%d: text %q", per, text.String())
		}
		// Tokens up to and including the one that completed the stop string.
		if usage == nil || usage.CompletionTokens != len("hello wor") || len(ids) != len("hello wor") {
			t.Errorf("per=%d: usage %+v ids %v", per, usage, ids)
		}
		select {
		case <-gen.cancelCh:
		case <-time.After(time.Minute):
			t.Errorf("per=%d: engine request not cancelled after the stop string", per)
		}
		// Non-streamed, same cut.
		rec = do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","stop":"o w"}`)
		if resp := decode[api.CompletionResponse](t, rec); resp.Choices[0].Text != "hell" || *resp.Choices[0].FinishReason != "stop" {
			t.Errorf("non-stream cut: %+v", resp.Choices[0])
		}
	}
}

func TestCompletionLogprobs(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("aé"), nil)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","logprobs":2}`)
	var raw struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage api.Usage `json:"usage"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err, rec.Body)
	}
	lp := raw.Choices[0].Logprobs
	n := raw.Usage.CompletionTokens // 'a', 2 bytes of é, EOS
	if n != 4 || len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("lengths: %+v (n=%d)", lp, n)
	}
	if fmt.Sprint(lp.TextOffset) != "[0 1 1 2]" || lp.Tokens[0] != "a" || lp.TokenLogprobs[1] != -0.25 {
		t.Errorf("offsets/tokens: %+v", lp)
	}
	for i, top := range lp.TopLogprobs {
		if len(top) < 1 || len(top) > 3 {
			t.Errorf("top_logprobs[%d] = %v", i, top)
		}
	}
	if _, ok := lp.TopLogprobs[0]["a"]; !ok {
		t.Errorf("chosen token missing from top_logprobs: %v", lp.TopLogprobs[0])
	}
}

func TestChat(t *testing.T) {
	gen := newFakeGen("Hi!")
	s, _ := newTestServer(t, gen, nil)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"hello"}]}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":10}`)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	resp := decode[api.ChatCompletionResponse](t, rec)
	c := resp.Choices[0]
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != "Hi!" || *c.FinishReason != "stop" {
		t.Errorf("resp %+v", resp)
	}
	if len(c.Logprobs.Content) != resp.Usage.CompletionTokens || len(c.Logprobs.Content[0].TopLogprobs) != 2 ||
		c.Logprobs.Content[0].Token != "H" || fmt.Sprint(c.Logprobs.Content[0].Bytes) != "[72]" {
		t.Errorf("logprobs %+v", c.Logprobs)
	}
	// The template wrote <s>; BOS is not doubled.
	r := gen.lastRequest()
	want := fakeTok{}.Encode("<s><|system|>be brief\n<|user|>hello\n<|assistant|>", false, true)
	if fmt.Sprint(r.Prompt) != fmt.Sprint(want) || r.Logprobs != 2 || r.MaxTokens != 10 {
		t.Errorf("engine prompt %v\nwant %v (logprobs %d max %d)", r.Prompt, want, r.Logprobs, r.MaxTokens)
	}
	// Default max_tokens is the rest of the context.
	do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"}]}`)
	if r := gen.lastRequest(); r.MaxTokens != 128-len(r.Prompt) {
		t.Errorf("default chat max_tokens %d", r.MaxTokens)
	}
}

func TestChatStream(t *testing.T) {
	gen := newFakeGen("Hey there")
	gen.perOutput = 2
	s, _ := newTestServer(t, gen, nil)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"}],"stream":true,
		"stream_options":{"include_usage":true},"stop":"ere","logprobs":true}`)
	events := sseEvents(t, rec.Body.String())
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var chunks []api.ChatCompletionChunk
	for _, ev := range events[:len(events)-1] {
		var c api.ChatCompletionChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("object %q", c.Object)
		}
		chunks = append(chunks, c)
	}
	first, last, fin := chunks[0], chunks[len(chunks)-1], chunks[len(chunks)-2]
	if first.Choices[0].Delta.Role != "assistant" || first.Choices[0].Delta.Content == nil || *first.Choices[0].Delta.Content != "" {
		t.Errorf("first chunk %+v", first)
	}
	var text strings.Builder
	var nlp int
	for _, c := range chunks[1 : len(chunks)-2] {
		d := c.Choices[0].Delta
		if d.Role != "" || d.Content == nil || c.Choices[0].FinishReason != nil {
			t.Errorf("content chunk %+v", c)
			continue
		}
		text.WriteString(*d.Content)
		if c.Choices[0].Logprobs != nil {
			nlp += len(c.Choices[0].Logprobs.Content)
		}
	}
	if text.String() != "Hey th" {
		t.Errorf("text %q", text.String())
	}
	if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" || fin.Choices[0].Delta.Content != nil {
		t.Errorf("finish chunk %+v", fin)
	}
	if last.Usage == nil || len(last.Choices) != 0 || last.Usage.CompletionTokens != nlp || nlp != len("Hey there") {
		t.Errorf("usage chunk %+v (logprob entries %d)", last, nlp)
	}
}

func TestModelsTokenizeHealth(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.BlockSize = 32 })
	h := s.Handler()
	list := decode[api.ModelList](t, do(h, "GET", "/v1/models", ""))
	m := list.Data[0]
	if list.Object != "list" || m.ID != testModel || m.Object != "model" || m.OwnedBy != "stockpot" ||
		m.Stockpot != (api.ModelExtras{Fingerprint: "fp-123", ContextLength: 128, BlockSize: 32}) {
		t.Errorf("models %+v", list)
	}
	if card := decode[api.ModelCard](t, do(h, "GET", "/v1/models/"+testModel, "")); card.ID != testModel {
		t.Errorf("card %+v", card)
	}
	tok := decode[api.TokenizeResponse](t, do(h, "POST", "/tokenize", `{"prompt":"ab"}`))
	if fmt.Sprint(tok.Tokens) != "[0 99 100]" || tok.Count != 3 {
		t.Errorf("tokenize %+v", tok)
	}
	tok = decode[api.TokenizeResponse](t, do(h, "POST", "/tokenize", `{"prompt":"ab","add_special":false}`))
	if fmt.Sprint(tok.Tokens) != "[99 100]" {
		t.Errorf("tokenize without specials %+v", tok)
	}
	tok = decode[api.TokenizeResponse](t, do(h, "POST", "/tokenize", `{"messages":[{"role":"user","content":"q"}]}`))
	if tok.Tokens[0] != fakeBOS || tok.Count != len(fakeTok{}.Encode("<s><|user|>q\n<|assistant|>", false, true)) {
		t.Errorf("tokenize chat %+v", tok)
	}
	// The completion prompt gets exactly the tokens /tokenize reports.
	do(h, "POST", "/v1/completions", `{"prompt":"ab"}`)
	if got := s.gen.(*fakeGen).lastRequest().Prompt; fmt.Sprint(got) != "[0 99 100]" {
		t.Errorf("completion prompt %v", got)
	}
	detok := decode[api.DetokenizeResponse](t, do(h, "POST", "/detokenize", `{"tokens":[0,99,100]}`))
	if detok.Prompt != "ab" {
		t.Errorf("detokenize %+v", detok)
	}
	if rec := do(h, "GET", "/health", ""); rec.Code != 200 {
		t.Errorf("health %d", rec.Code)
	}
	s.draining.Store(true)
	if rec := do(h, "GET", "/health", ""); rec.Code != 503 {
		t.Errorf("health while draining %d", rec.Code)
	}
	if rec := do(h, "POST", "/v1/completions", `{"prompt":"x"}`); rec.Code != 503 {
		t.Errorf("completion while draining %d", rec.Code)
	}
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// counterValue returns the value of name{label=value} (label "" for an unlabelled metric).
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mf := gather(t, reg)[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
	for _, m := range mf.Metric {
		match := label == ""
		for _, lp := range m.Label {
			if lp.GetName() == label && lp.GetValue() == value {
				match = true
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

func TestMetricsMatchUsage(t *testing.T) {
	gen := newFakeGen("some output text")
	s, reg := newTestServer(t, gen, nil)
	if r := counterValue(t, reg, "stockpot_prefix_cache_hit_rate", "", ""); !math.IsNaN(r) {
		t.Errorf("hit rate with no queries = %v, want NaN", r)
	}
	var sum api.Usage
	add := func(u *api.Usage) {
		sum.PromptTokens += u.PromptTokens
		sum.CompletionTokens += u.CompletionTokens
		sum.PromptTokensDetails.CachedTokens += u.PromptTokensDetails.CachedTokens
		sum.Cache.DeviceTokens += u.Cache.DeviceTokens
		sum.Cache.HostTokens += u.Cache.HostTokens
		sum.Cache.ComputedTokens += u.Cache.ComputedTokens
		sum.Cache.DiscardedTokens += u.Cache.DiscardedTokens
	}
	bodies := []string{
		`{"prompt":"a fairly long prompt of some length","max_tokens":3}`,
		`{"prompt":[5,6,7,8,9,10,11,12,13],"stop":"out"}`,
		`{"prompt":"short","stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"streamed and stopped","stream":true,"stream_options":{"include_usage":true},"stop":"put"}`,
	}
	for _, b := range bodies {
		rec := do(s.Handler(), "POST", "/v1/completions", b)
		if !strings.Contains(b, `"stream"`) {
			add(decode[api.CompletionResponse](t, rec).Usage)
			continue
		}
		for _, ev := range sseEvents(t, rec.Body.String()) {
			var c api.CompletionResponse
			if json.Unmarshal([]byte(ev), &c) == nil && c.Usage != nil {
				add(c.Usage)
			}
		}
	}
	rec := do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`)
	add(decode[api.ChatCompletionResponse](t, rec).Usage)
	do(s.Handler(), "POST", "/v1/completions", `{"prompt":"x","max_tokens":-1}`) // a 400 adds no tokens

	for _, c := range []struct {
		name, label, value string
		want               int
	}{
		{"stockpot_prompt_tokens_total", "source", "computed", sum.Cache.ComputedTokens},
		{"stockpot_prompt_tokens_total", "source", "device", sum.Cache.DeviceTokens},
		{"stockpot_prompt_tokens_total", "source", "host", sum.Cache.HostTokens},
		{"stockpot_prompt_tokens_total", "source", "disk", 0},
		{"stockpot_prefix_cache_queries_total", "", "", sum.PromptTokens},
		{"stockpot_prefix_cache_hits_total", "tier", "device", sum.Cache.DeviceTokens},
		{"stockpot_prefix_cache_hits_total", "tier", "host", sum.Cache.HostTokens},
		{"stockpot_prompt_tokens_discarded_total", "", "", sum.Cache.DiscardedTokens},
		{"stockpot_generation_tokens_total", "", "", sum.CompletionTokens},
		{"stockpot_requests_total", "status", "200", 5},
		{"stockpot_requests_total", "status", "400", 1},
		{"stockpot_time_to_first_token_seconds", "", "", 5},
		{"stockpot_e2e_request_latency_seconds", "", "", 5},
		{"stockpot_requests_running", "", "", 1},
		{"stockpot_requests_waiting", "", "", 2},
		{"stockpot_kv_cache_usage_bytes", "tier", "device", 10 * 4096},
		{"stockpot_kv_cache_capacity_bytes", "tier", "device", 100 * 4096},
		{"stockpot_kv_cache_evictions_total", "tier", "device", 7},
	} {
		if got := counterValue(t, reg, c.name, c.label, c.value); got != float64(c.want) {
			t.Errorf("%s{%s=%q} = %v, want %d", c.name, c.label, c.value, got, c.want)
		}
	}
	// The inference gateway's KV signal: 10 of 100 blocks held.
	if got := counterValue(t, reg, "stockpot_kv_cache_usage_ratio", "", ""); got != 0.1 {
		t.Errorf("stockpot_kv_cache_usage_ratio = %v, want 0.1", got)
	}
	want := float64(sum.PromptTokensDetails.CachedTokens) / float64(sum.PromptTokens)
	if got := counterValue(t, reg, "stockpot_prefix_cache_hit_rate", "", ""); math.Abs(got-want) > 1e-12 {
		t.Errorf("hit rate %v, want %v", got, want)
	}
	// The text format is served.
	if rec := do(s.Handler(), "GET", "/metrics", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), "stockpot_prefix_cache_hits_total{tier=\"device\"}") {
		t.Errorf("/metrics: %d %s", rec.Code, rec.Body)
	}
}

func TestHitWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	w := newHitWindow(2, time.Minute, func() time.Time { return now })
	if !math.IsNaN(w.rate()) {
		t.Error("empty window should be NaN")
	}
	w.add(10, 10)
	w.add(10, 0)
	w.add(10, 5) // pushes out the first
	if r := w.rate(); r != 0.25 {
		t.Errorf("rate %v, want 0.25", r)
	}
	now = now.Add(2 * time.Minute)
	if !math.IsNaN(w.rate()) {
		t.Error("aged-out window should be NaN")
	}
}

func TestDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{true, false} {
		gen := newFakeGen("tick")
		gen.block = true
		s, reg := newTestServer(t, gen, nil)
		ts := httptest.NewServer(s.Handler())
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"prompt":"x","stream":%v,"max_tokens":100}`, stream)
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
		done := make(chan struct{})
		streaming := make(chan struct{}) // the first event was read (or the request failed)
		markStreaming := sync.OnceFunc(func() { close(streaming) })
		go func() {
			defer close(done)
			defer markStreaming()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if stream {
				line, _ := bufio.NewReader(resp.Body).ReadString('\n')
				if !strings.HasPrefix(line, "data: ") {
					t.Errorf("first line %q", line)
				}
				markStreaming()
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
		// The client goes away once its request runs: a stream once its first event came, a
		// plain request (answered only at its end) once the engine has it.
		if stream {
			<-streaming
		} else {
			<-gen.started
		}
		cancel()
		select {
		case <-gen.cancelCh:
		case <-time.After(time.Minute):
			t.Fatalf("stream=%v: engine request not cancelled on disconnect", stream)
		}
		<-done
		ts.Close()
		if got := counterValue(t, reg, "stockpot_requests_total", "status", "499"); got != 1 {
			t.Errorf("stream=%v: requests_total{499} = %v", stream, got)
		}
		if got := counterValue(t, reg, "stockpot_prefix_cache_queries_total", "", ""); got != 0 {
			t.Errorf("stream=%v: a disconnected request was counted: %v", stream, got)
		}
	}
}

func TestServeDrain(t *testing.T) {
	// Graceful: a running request finishes.
	gen := newFakeGen("slow answer")
	gen.delay = 20 * time.Millisecond
	s, _ := newTestServer(t, gen, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	<-gen.started // the drain begins while the request runs (20 ms a token)
	cancel()
	if r := <-got; !strings.HasPrefix(r, "200 ") || !strings.Contains(r, "slow answer") {
		t.Errorf("drained request: %s", r)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	// Closed, not merely idle (a connection attempt could reach whoever has the port since).
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener after drain: Accept = %v, want net.ErrClosed", err)
	}

	// Forced: a request that never ends is cancelled after DrainTimeout.
	gen = newFakeGen("x")
	gen.block = true
	s, _ = newTestServer(t, gen, func(c *Config) { c.DrainTimeout = 100 * time.Millisecond })
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel = context.WithCancel(context.Background())
	go func() { served <- s.Serve(ctx, ln) }()
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-gen.started
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(time.Minute): // a watchdog: DrainTimeout is 100 ms
		t.Fatal("Serve did not return after the drain timeout")
	}
	select {
	case <-gen.cancelCh:
	default:
		t.Error("engine request not cancelled by the forced drain")
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := (Config{ContextLength: 10}).validate(); err == nil {
		t.Error("missing ModelName accepted")
	}
	if _, err := (Config{ModelName: "m"}).validate(); err == nil {
		t.Error("missing ContextLength accepted")
	}
	in := Config{ModelName: "m", ContextLength: 64, MaxPromptTokens: 1000}
	c, err := in.validate()
	if err != nil || c.MaxPromptTokens != 63 || c.BlockSize != 16 || c.MaxBodyBytes != 16<<20 || c.DrainTimeout != 30*time.Second {
		t.Errorf("validate: %+v %v", c, err)
	}
	if in.MaxPromptTokens != 1000 || in.Logger != nil {
		t.Error("validate mutated the caller's Config")
	}
}
