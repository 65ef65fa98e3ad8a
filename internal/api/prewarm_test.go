package api

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var prewarmSeeds = []string{
	`{"prompt":"You are a helpful assistant."}`,
	`{"prompt":[1,2,3,4],"cache_salt":"t1","pin":{"ttl":"1h"}}`,
	`{"messages":[{"role":"system","content":"sys"}],"tools":[{"type":"function","function":{"name":"f"}}],"pin":{"ttl":300}}`,
	`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true,"pin":{"ttl":"24h"}}`,
	`{"prompt":"x","messages":[{"role":"user","content":"hi"}]}`,
	`{"prompt":"x","pin":{"ttl":"2h"}}`,
	`{"prompt":"x","pin":{"ttl":1.5}}`,
	`{"prompt":[[1,2],[3]]}`,
	`{"pin":{"ttl":"5m"}}`,
}

func TestParsePrewarmRequest(t *testing.T) {
	for _, tc := range []struct {
		body   string
		tokens int           // > 0: a token prompt of this length
		text   string        // a text prompt
		chat   int           // > 0: messages
		ttl    time.Duration // the pin
	}{
		{body: `{"prompt":"sys"}`, text: "sys"},
		{body: `{"prompt":[5,6,7],"pin":{"ttl":"5m"}}`, tokens: 3, ttl: 5 * time.Minute},
		{body: `{"prompt":[[5,6]],"pin":{"ttl":"1h"}}`, tokens: 2, ttl: time.Hour},
		{body: `{"messages":[{"role":"system","content":"s"}],"tools":[{"type":"function","function":{"name":"f"}}],"pin":{"ttl":"24h"}}`, chat: 1, ttl: 24 * time.Hour},
		{body: `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"pin":{"ttl":90},"cache_salt":"t"}`, chat: 2, ttl: 90 * time.Second},
		{body: `{"prompt":"x","pin":null}`, text: "x"},
	} {
		r, err := ParsePrewarmRequest([]byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		switch {
		case tc.tokens > 0 && (r.Completion == nil || len(r.Completion.PromptTokens) != tc.tokens):
			t.Errorf("%s: want %d prompt tokens, have %+v", tc.body, tc.tokens, r.Completion)
		case tc.text != "" && (r.Completion == nil || r.Completion.PromptText != tc.text):
			t.Errorf("%s: want text %q, have %+v", tc.body, tc.text, r.Completion)
		case tc.chat > 0 && (r.Chat == nil || len(r.Chat.Messages) != tc.chat):
			t.Errorf("%s: want %d messages, have %+v", tc.body, tc.chat, r.Chat)
		case r.PinTTL != tc.ttl:
			t.Errorf("%s: pin %v, want %v", tc.body, r.PinTTL, tc.ttl)
		}
		if r.Chat != nil && r.Chat.GenerationPrompt() {
			t.Errorf("%s: add_generation_prompt defaults to true; a prewarm wants false", tc.body)
		}
	}
	for _, tc := range []struct{ body, param string }{
		{`{}`, "prompt"},
		{`{"prompt":"x","messages":[{"role":"user","content":"u"}]}`, "prompt"},
		{`{"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]}`, "tools"},
		{`{"prompt":7}`, "prompt"},
		{`{"prompt":[]}`, "prompt"},
		{`{"prompt":[[1],[2]]}`, "prompt"},
		{`{"prompt":"x","pin":{"ttl":"2h"}}`, "pin.ttl"},
		{`{"prompt":"x","pin":{"ttl":0}}`, "pin.ttl"},
		{`{"prompt":"x","pin":{"ttl":1e9}}`, "pin.ttl"},
		{`{"prompt":"x","pin":{"ttl":2.5}}`, "pin.ttl"},
		{`{"prompt":"x","pin":{}}`, "pin.ttl"},
		{`{"prompt":"x","pin":"1h"}`, "pin"},
		{`{"prompt":"x","cache_salt":"` + strings.Repeat("s", MaxCacheSaltBytes+1) + `"}`, "cache_salt"},
		{`{"messages":[{"role":"wizard","content":"u"}]}`, "messages[0].role"},
		{`{"messages":"hi"}`, "messages"},
	} {
		_, err := ParsePrewarmRequest([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Status/100 != 4 || e.Param != tc.param {
			t.Errorf("%.80s: have %v, want a 4xx on %q", tc.body, err, tc.param)
		}
	}
}

func FuzzPrewarmRequest(f *testing.F) {
	for _, s := range prewarmSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParsePrewarmRequest(body)
		if err != nil {
			checkParsed(t, nil, err)
			return
		}
		if (r.Completion == nil) == (r.Chat == nil) {
			t.Fatalf("want exactly one of prompt and messages: %+v", r)
		}
		if r.PinTTL < 0 || r.PinTTL > MaxPinTTL {
			t.Fatalf("pin ttl %v accepted", r.PinTTL)
		}
		if c := r.Completion; c != nil {
			if c.PromptIsTokens == (c.PromptText != "") || c.PromptIsTokens && len(c.PromptTokens) == 0 {
				t.Fatalf("bad prompt accepted: %+v", c)
			}
		}
		if r.Chat != nil && len(r.Chat.Messages) == 0 {
			t.Fatal("no messages accepted")
		}
	})
}
