package api

import (
	"errors"
	"strings"
	"testing"
)

func init() {
	// The fuzz targets start from these too: the key on each endpoint, and the edge cases.
	fuzzSeeds = append(fuzzSeeds,
		`{"prompt":"hi","prompt_cache_key":"user-42"}`,
		`{"messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"conv:7"}`,
		`{"messages":[{"role":"user","content":"hi"}],"prompt_cache_key":7}`,
		`{"prompt":"hi","prompt_cache_key":null}`,
	)
	responsesSeeds = append(responsesSeeds,
		`{"input":"hi","prompt_cache_key":"agent-1"}`,
		`{"input":"hi","prompt_cache_key":["x"]}`,
	)
}

// TestPromptCacheKey: the key is accepted on all three OpenAI endpoints, and a wrong type or
// an overlong key is a 400 naming the field.
func TestPromptCacheKey(t *testing.T) {
	long := strings.Repeat("k", MaxPromptCacheKeyBytes+1)
	ok := strings.Repeat("k", MaxPromptCacheKeyBytes)
	parse := map[string]func(string) (string, error){
		"completions": func(k string) (string, error) {
			r, err := ParseCompletionRequest([]byte(`{"prompt":"hi","prompt_cache_key":` + k + `}`))
			if err != nil {
				return "", err
			}
			return r.PromptCacheKey, nil
		},
		"chat": func(k string) (string, error) {
			r, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}],"prompt_cache_key":` + k + `}`))
			if err != nil {
				return "", err
			}
			return r.PromptCacheKey, nil
		},
		"responses": func(k string) (string, error) {
			r, err := ParseResponsesRequest([]byte(`{"input":"hi","prompt_cache_key":` + k + `}`))
			if err != nil {
				return "", err
			}
			c, err := r.ChatRequest(r.Items)
			if err != nil {
				return "", err
			}
			if c.PromptCacheKey != r.PromptCacheKey {
				return "", errors.New("the chat request lost prompt_cache_key")
			}
			return r.PromptCacheKey, nil
		},
	}
	for name, p := range parse {
		for _, tc := range []struct{ in, want string }{{`"user-1"`, "user-1"}, {`null`, ""}, {`"` + ok + `"`, ok}} {
			if have, err := p(tc.in); err != nil || have != tc.want {
				t.Errorf("%s %.20s: have %.20q, %v; want %.20q", name, tc.in, have, err, tc.want)
			}
		}
		for _, bad := range []string{`7`, `["a"]`, `{"a":1}`, `"` + long + `"`} {
			_, err := p(bad)
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Param != "prompt_cache_key" {
				t.Errorf("%s %.20s: have %v, want a 400 on prompt_cache_key", name, bad, err)
			}
		}
	}
}
