package api

import (
	"errors"
	"testing"
)

// Seeds beyond testdata/fuzz: the shapes clients actually send.
var fuzzSeeds = []string{
	`{"model":"m","prompt":"hello","max_tokens":16,"temperature":0.7,"stop":["\n"],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"prompt":[1,2,3],"logprobs":5,"return_token_ids":true}`,
	`{"prompt":[[1,2]],"seed":42}`,
	`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3}`,
	`{"messages":[{"role":"system","content":[{"type":"text","text":"x"}]}],"stop":"END"}`,
	`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}],"tool_choice":"required","parallel_tool_calls":false}`,
	`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"o","strict":true,"schema":{"$defs":{"p":{"type":"string"}},"anyOf":[{"$ref":"#/$defs/p"},{"type":"null"}]}}}}`,
	`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`,
	`{"messages":[{"role":"user","content":"x"}],"prompt_cache_retention":"24h","pin_strict":true}`,
	`{"prompt":"x","prompt_cache_retention":"in_memory"}`,
	`{"prompt":"x","prompt_cache_retention":"1h"}`,
	`{"prompt":"x","max_offload_tokens":256}`,
	`{"prompt":"x","max_offload_tokens":-1}`,
	`{"messages":[{"role":"user","content":"x"}],"max_offload_tokens":0}`,
	`{"messages":[{"role":"user","content":"x"}],"max_offload_tokens":1.5}`,
}

func checkParsed(t *testing.T, p *GenerationParams, err error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Status < 400 || e.Status > 499 {
			t.Fatalf("error %v is not a 4xx *Error", err)
		}
		return
	}
	if len(p.StopStrings) > MaxStop {
		t.Fatalf("%d stop strings", len(p.StopStrings))
	}
	for _, s := range p.StopStrings {
		if s == "" {
			t.Fatal("empty stop string kept")
		}
	}
	if p.MaxTokens != nil && *p.MaxTokens < 1 {
		t.Fatalf("max_tokens %d accepted", *p.MaxTokens)
	}
	if p.MaxOffloadTokens != nil && *p.MaxOffloadTokens < 0 {
		t.Fatalf("max_offload_tokens %d accepted", *p.MaxOffloadTokens)
	}
	if p.PromptCacheRetention != "" && p.RetentionTTL() <= 0 {
		t.Fatalf("prompt_cache_retention %q accepted", p.PromptCacheRetention)
	}
}

func FuzzCompletionRequest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseCompletionRequest(body)
		if err != nil {
			checkParsed(t, nil, err)
			return
		}
		checkParsed(t, &r.GenerationParams, nil)
		if r.PromptIsTokens == (r.PromptText != "") {
			t.Fatalf("prompt is both or neither text and tokens: %q %v", r.PromptText, r.PromptTokens)
		}
		if r.PromptIsTokens && len(r.PromptTokens) == 0 {
			t.Fatal("empty token prompt accepted")
		}
		for _, id := range r.PromptTokens {
			if id < 0 {
				t.Fatalf("negative token id %d", id)
			}
		}
	})
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChatRequest(body)
		if err != nil {
			checkParsed(t, nil, err)
			return
		}
		checkParsed(t, &r.GenerationParams, nil)
		if len(r.Messages) == 0 {
			t.Fatal("no messages accepted")
		}
		for _, m := range r.Messages {
			if _, ok := chatRoles[m.Role]; !ok {
				t.Fatalf("role %q accepted", m.Role)
			}
		}
		if n := r.NumTopLogprobs(); n < 0 || n > MaxLogprobs || (n > 0 && !r.WantLogprobs()) {
			t.Fatalf("top_logprobs %d accepted", n)
		}
	})
}
