package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"stockpot/internal/pipeline"
)

// TestTokenizeRender: POST /tokenize/render?endpoint=PATH answers the tokens the endpoint
// renders (pipeline.RenderRequest's, the offline renderer's) for each dialect, tools and
// chat_template_kwargs included; a bad endpoint, a body the endpoint refuses and a prompt
// over the context are 400s in the API's error shape.
func TestTokenizeRender(t *testing.T) {
	tok := kimiTokenizer(t)
	s, _ := newTestServerTok(t, &fakeGen{}, tok, func(c *Config) {
		c.ContextLength, c.MaxPromptTokens = 4096, 4095
		c.MaxBodyBytes = 8 << 20
	})
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	bodies := map[string][]string{
		pipeline.PathCompletions: {`{"prompt":"Once upon a time"}`, `{"prompt":[1,2,3]}`},
		pipeline.PathChat: {
			`{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}],"tools":` + tools + `,"chat_template_kwargs":{"enable_thinking":false}}`,
		},
		pipeline.PathResponses: {`{"instructions":"You are terse.","input":"hi","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`},
		pipeline.PathMessages:  {`{"max_tokens":8,"system":"You are terse.","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`},
	}
	for path, bs := range bodies {
		for _, body := range bs {
			rec := do(s.Handler(), http.MethodPost, renderPath+"?endpoint="+path, body)
			var got struct {
				Tokens []int32 `json:"tokens"`
				Count  int     `json:"count"`
			}
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
				t.Fatalf("%s %s: %d %s", path, body, rec.Code, rec.Body.String())
			}
			want, err := pipeline.RenderRequest(tok, path, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != len(got.Tokens) || !slicesEqual(got.Tokens, want.Tokens) {
				t.Errorf("%s %s:\n got %v\nwant %v", path, body, got.Tokens, want.Tokens)
			}
		}
	}
	for _, c := range []struct{ query, body, want string }{
		{"", `{"prompt":"x"}`, "endpoint"},
		{"?endpoint=/v1/embeddings", `{"prompt":"x"}`, "endpoint"},
		{"?endpoint=" + pipeline.PathChat, `{"messages":`, "invalid_request_error"},
		{"?endpoint=" + pipeline.PathMessages, `{"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"?endpoint=" + pipeline.PathChat, `{"messages":[{"role":"user","content":"` + strings.Repeat("word ", 5000) + `"}]}`, "context length"},
		{"?endpoint=" + pipeline.PathCompletions, `{"prompt":"` + strings.Repeat(" ", 4<<20) + `"}`, "context length"},
	} {
		rec := do(s.Handler(), http.MethodPost, renderPath+c.query, c.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.want) || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("%s %.60s: %d %.300s (want 400 naming %s)", c.query, c.body, rec.Code, rec.Body.String(), c.want)
		}
	}
	if rec := do(s.Handler(), http.MethodGet, renderPath+"?endpoint="+pipeline.PathChat, ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %s", rec.Code, rec.Body.String())
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
