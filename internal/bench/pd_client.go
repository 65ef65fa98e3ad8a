package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"
)

// pdTarget is where the mixed load goes: one URL that prefills and decodes (a both replica or
// a router), or a prefill and a decode replica between which the client hands each request
// off as vLLM's disaggregation proxy does.
type pdTarget struct {
	url     string // both replica or router; empty when prefill and decode are set
	prefill string
	decode  string
	http    *http.Client
}

// prefillRequest is body as vLLM's proxy sends it to a prefill replica: whole (not streamed),
// one token, and do_remote_decode.
func prefillRequest(body map[string]any) map[string]any {
	p := maps.Clone(body)
	p["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	p["stream"], p["max_tokens"] = false, 1
	delete(p, "stream_options")
	return p
}

// decodeRequest is body with the prefill's kv_transfer_params, as the proxy sends it on to a
// decode replica.
func decodeRequest(body map[string]any, kv json.RawMessage) map[string]any {
	d := maps.Clone(body)
	d["kv_transfer_params"] = kv
	return d
}

// prefillAnswer is what the client reads of the prefill replica's answer.
type prefillAnswer struct {
	KV      json.RawMessage
	Timings *pdTimings
}

// pdTimings is usage.timings with the decode phase (ms).
type pdTimings struct {
	QueueMs   float64 `json:"queue_ms"`
	RestoreMs float64 `json:"restore_ms"`
	PrefillMs float64 `json:"prefill_ms"`
	TTFTMs    float64 `json:"ttft_ms"`
	DecodeMs  float64 `json:"decode_ms"`
}

// pdUsage is the usage object the P/D client reads (Stockpot's cache split and timings).
type pdUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	Cache            *struct {
		ComputedTokens int `json:"computed_tokens"`
		RemoteTokens   int `json:"remote_tokens"`
		TransferTokens int `json:"transfer_tokens"`
	} `json:"cache"`
	Timings *pdTimings `json:"timings"`
}

// parsePrefillAnswer reads a prefill replica's completion answer: its top-level
// kv_transfer_params, which must be a JSON object (absent or null means the replica did not
// hand off: it is not a prefill replica, or refused).
func parsePrefillAnswer(b []byte) (prefillAnswer, error) {
	var r struct {
		KV    json.RawMessage `json:"kv_transfer_params"`
		Usage *pdUsage        `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return prefillAnswer{}, fmt.Errorf("prefill answer: %w", err)
	}
	kv := bytes.TrimSpace(r.KV)
	if len(kv) == 0 || kv[0] != '{' {
		return prefillAnswer{}, errors.New("prefill answer has no kv_transfer_params object: the replica did not hand off")
	}
	a := prefillAnswer{KV: json.RawMessage(kv)}
	if r.Usage != nil {
		a.Timings = r.Usage.Timings
	}
	return a, nil
}

// post sends body to url+path and returns the response, or an error naming a non-200 status
// with the start of its body.
func (t *pdTarget) post(ctx context.Context, url, path string, body map[string]any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, fmt.Errorf("%s%s: HTTP %d: %s", url, path, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// prefillStep runs the first half of a handoff: the whole, one-token request to the prefill
// replica.
func (t *pdTarget) prefillStep(ctx context.Context, body map[string]any) (prefillAnswer, error) {
	resp, err := t.post(ctx, t.prefill, "/v1/completions", prefillRequest(body))
	if err != nil {
		return prefillAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return prefillAnswer{}, err
	}
	return parsePrefillAnswer(b)
}

// run sends one streamed completion (handed off when the target is a pair) and records it in
// s; s.Start is set by the caller. epoch is the run's start.
func (t *pdTarget) run(ctx context.Context, body map[string]any, epoch time.Time, s *pdSample) *pdUsage {
	body = maps.Clone(body)
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	body["return_token_ids"] = true
	start := epoch.Add(s.Start)
	url := t.url
	if url == "" {
		p, err := t.prefillStep(ctx, body)
		if err != nil {
			s.Err = err.Error()
			return nil
		}
		body, url = decodeRequest(body, p.KV), t.decode
	}
	resp, err := t.post(ctx, url, "/v1/completions", body)
	if err != nil {
		s.Err = err.Error()
		return nil
	}
	defer resp.Body.Close()
	u, err := readTokenStream(resp.Body, func(tokens int) {
		at := time.Since(start)
		if len(s.Arrivals) == 0 {
			s.TTFT = at
		}
		s.Arrivals = append(s.Arrivals, at)
		s.Tokens = append(s.Tokens, tokens)
	})
	if err != nil {
		s.Err = err.Error()
		return u
	}
	if u != nil {
		s.PromptTokens, s.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if u.Cache != nil {
			s.TransferTokens = u.Cache.TransferTokens
		}
	}
	return u
}

// readTokenStream reads a completions SSE stream to [DONE], calling token for every chunk that
// carries output (with the number of token ids it carries, at least 1), and returns the usage
// of the last chunk that had one. A stream that ends without [DONE], or carries an error
// object, is an error.
func readTokenStream(r io.Reader, token func(n int)) (*pdUsage, error) {
	var usage *pdUsage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return usage, nil
		}
		var c struct {
			Choices []struct {
				Text     string  `json:"text"`
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage *pdUsage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return usage, fmt.Errorf("bad SSE chunk: %w", err)
		}
		if c.Error != nil {
			return usage, fmt.Errorf("stream error: %s", c.Error.Message)
		}
		for _, ch := range c.Choices {
			if n := len(ch.TokenIDs); n > 0 || ch.Text != "" {
				token(max(n, 1))
			}
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if err := sc.Err(); err != nil {
		return usage, fmt.Errorf("reading stream: %w", err)
	}
	return usage, errors.New("stream ended without [DONE]")
}
