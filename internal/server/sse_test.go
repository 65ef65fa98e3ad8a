package server

import (
	"encoding/json"
	"testing"

	"stockpot/internal/api"
)

var jsonStringSeeds = []string{"", "hello", " wor", `"q"\`, "<a href='x'>&amp;</a>", "\x00\x01\b\f\n\r\t\x1f\x7f",
	"é漢字🙂", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "\U0010FFFF"}

// TestChunkTemplateMatchesMarshal: every event the SSE writer sends, through the template or
// not, is "data: " + json.Marshal(chunk) + "\n\n", over a stream's sequence of shapes.
func TestChunkTemplateMatchesMarshal(t *testing.T) {
	str := func(s string) *string { return &s }
	chat := func(d api.ChatDelta) *api.ChatCompletionChunk {
		return &api.ChatCompletionChunk{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: "m<&>", SystemFingerprint: "fp",
			Choices: []api.ChatChunkChoice{{Delta: d}}}
	}
	comp := func(text string) *api.CompletionResponse {
		return &api.CompletionResponse{ID: "cmpl-1", Object: "text_completion", Created: 7, Model: "m",
			Choices: []api.CompletionChoice{{Text: text}}}
	}
	var seq []any
	seq = append(seq, chat(api.ChatDelta{Role: "assistant", Content: str("")}))
	for _, s := range jsonStringSeeds {
		seq = append(seq, chat(api.ChatDelta{Content: str(s)}))
	}
	withLP := chat(api.ChatDelta{Content: str("x")})
	withLP.Choices[0].Logprobs = &api.ChatLogprobs{Content: []api.ChatTokenLogprob{}}
	withIDs := chat(api.ChatDelta{Content: str("y")})
	withIDs.Choices[0].TokenIDs = []int32{5}
	other := chat(api.ChatDelta{Content: str("z")})
	other.ID = "chatcmpl-2"
	finish := chat(api.ChatDelta{})
	finish.Choices[0].FinishReason = str("stop")
	seq = append(seq, withLP, chat(api.ChatDelta{Content: str("after")}), withIDs, other,
		chat(api.ChatDelta{Content: str("back")}), chat(api.ChatDelta{ReasoningContent: str("r")}), finish,
		&api.ChatCompletionChunk{ID: "chatcmpl-1", Choices: []api.ChatChunkChoice{}, Usage: &api.Usage{PromptTokens: 3}})
	for _, s := range jsonStringSeeds {
		seq = append(seq, comp(s))
	}
	two := comp("a")
	two.Choices = append(two.Choices, api.CompletionChoice{Index: 1, Text: "b"})
	seq = append(seq, two, comp("again"), map[string]any{"error": "x"})

	rec := &discardRW{keep: true}
	sse := newSSE(rec)
	for i, v := range seq {
		rec.buf.Reset()
		if err := sse.send(v); err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := "data: " + string(js) + "\n\n"; rec.buf.String() != want {
			t.Errorf("event %d: have %q, want %q", i, rec.buf.String(), want)
		}
	}
}
