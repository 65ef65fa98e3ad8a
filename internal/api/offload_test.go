package api

import (
	"errors"
	"strconv"
	"testing"
)

func init() {
	// The fuzz targets start from these too: the field on each endpoint, and the edge cases.
	responsesSeeds = append(responsesSeeds,
		`{"input":"hi","max_offload_tokens":128}`,
		`{"input":"hi","max_offload_tokens":-1}`,
	)
	messagesSeeds = append(messagesSeeds,
		`{"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":0}`,
		`{"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":-3}`,
		`{"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":"x"}`,
	)
}

// TestMaxOffloadTokens: max_offload_tokens is accepted on completions, chat, Responses and
// Messages as an integer >= 0 and reaches the generation parameters; a negative number, a
// fraction or another type is a 400.
func TestMaxOffloadTokens(t *testing.T) {
	parse := map[string]func(string) (*int, error){
		"completions": func(v string) (*int, error) {
			r, err := ParseCompletionRequest([]byte(`{"prompt":"hi","max_offload_tokens":` + v + `}`))
			if err != nil {
				return nil, err
			}
			return r.MaxOffloadTokens, nil
		},
		"chat": func(v string) (*int, error) {
			r, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":` + v + `}`))
			if err != nil {
				return nil, err
			}
			return r.MaxOffloadTokens, nil
		},
		"responses": func(v string) (*int, error) {
			r, err := ParseResponsesRequest([]byte(`{"input":"hi","max_offload_tokens":` + v + `}`))
			if err != nil {
				return nil, err
			}
			c, err := r.ChatRequest(r.Items)
			if err != nil {
				return nil, err
			}
			return c.MaxOffloadTokens, nil
		},
		"messages": func(v string) (*int, error) {
			r, err := ParseMessagesRequest([]byte(`{"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":`+v+`}`), false)
			if err != nil {
				return nil, err
			}
			return r.Chat.MaxOffloadTokens, nil
		},
	}
	show := func(p *int) string {
		if p == nil {
			return "absent"
		}
		return strconv.Itoa(*p)
	}
	for name, p := range parse {
		for _, tc := range []struct {
			in   string
			want *int
		}{{`null`, nil}, {`0`, new(0)}, {`256`, new(256)}} {
			have, err := p(tc.in)
			if err != nil || (have == nil) != (tc.want == nil) || have != nil && *have != *tc.want {
				t.Errorf("%s %s: have %s, %v; want %s", name, tc.in, show(have), err, show(tc.want))
			}
		}
		for _, bad := range []string{`-1`, `1.5`, `"8"`, `[8]`} {
			_, err := p(bad)
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Errorf("%s %s: have %v, want a 400", name, bad, err)
			}
		}
	}
}
