package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"stockpot/internal/bench"
	"stockpot/internal/offload"
)

// blendPassage is a retrieved passage of some 80 tokens (several full 16-token blocks).
func blendPassage(i int) string {
	return fmt.Sprintf("Passage %d. The river system number %d drains a basin of farmland and forest, "+
		"its tributaries rising in the hills to the north and joining the main channel near the old town, "+
		"where a stone bridge of seven arches has carried the road since the twelfth century and the mills "+
		"along the banks once ground grain for the whole valley.", i, i)
}

type blendUsage struct {
	Cache struct {
		BlendedTokens  *int `json:"blended_tokens"`
		BlendRecompute *int `json:"blend_recomputed_tokens"`
		DiskTokens     int  `json:"disk_tokens"`
		Blend          *struct {
			Chunks []struct {
				Start, End    int
				HitTokens     int    `json:"hit_tokens"`
				BlendedTokens int    `json:"blended_tokens"`
				Part          string `json:"part"`

				RestoredTokens map[string]int `json:"restored_tokens"`
			} `json:"chunks"`
		} `json:"blend"`
	} `json:"cache"`
}

func usageOfRaw(t *testing.T, raw string) blendUsage {
	t.Helper()
	var r struct{ Usage blendUsage }
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage
}

// TestBlendChatMarks: chunks marked with "blend": true on content parts through the official
// openai-go client (an extra field, option.WithJSONSet) and on Anthropic text blocks through
// anthropic-sdk-go, against serve with the real engine and the default model: at recompute 1
// the answer is the unmarked chat's, the usage names each chunk's part, the chunks are found
// again when the passages come in another order, and /metrics counts blended tokens as a
// source of the prompt tokens beside the recomputed ones.
func TestBlendChatMarks(t *testing.T) {
	url := agentInstance(t, true)
	ctx := context.Background()
	oc := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	chat := func(a, b int, opts ...option.RequestOption) (string, blendUsage) {
		t.Helper()
		r, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage("Answer from the passages."),
				openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
					openai.TextContentPart(blendPassage(a)), openai.TextContentPart(blendPassage(b)),
					openai.TextContentPart("Which bridge is the oldest?")}),
			},
			MaxTokens: openai.Int(8), Temperature: openai.Float(0),
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r.Choices[0].Message.Content, usageOfRaw(t, r.RawJSON())
	}
	marks := []option.RequestOption{option.WithJSONSet("messages.1.content.0.blend", true), option.WithJSONSet("messages.1.content.1.blend", true)}

	// The blended requests take a salt of their own: the unmarked one's prompt is not in their
	// prefix cache (it would be reused whole, nothing blended), and their chunks start cold.
	want, _ := chat(1, 2)
	marks = append(marks, option.WithJSONSet("cache_salt", "blend-test"))
	have, u := chat(1, 2, append(marks, option.WithJSONSet("blend", map[string]any{"recompute": 1}))...)
	if have != want {
		t.Errorf("recompute 1: %q, the unmarked chat's %q", have, want)
	}
	b := u.Cache.Blend
	if b == nil || len(b.Chunks) != 2 || b.Chunks[0].Part != "messages[1].content[0]" || b.Chunks[1].Part != "messages[1].content[1]" ||
		*u.Cache.BlendedTokens != 0 || *u.Cache.BlendRecompute == 0 {
		js, _ := json.Marshal(u.Cache)
		t.Fatalf("usage.cache %s, want both parts named, nothing blended, chunk tokens recomputed", js)
	}
	// The passages swapped and at the default fraction: both chunks come from the chunk cache.
	_, u = chat(2, 1, marks...)
	b = u.Cache.Blend
	if b == nil || len(b.Chunks) != 2 || b.Chunks[0].HitTokens == 0 || b.Chunks[1].HitTokens == 0 || *u.Cache.BlendedTokens == 0 {
		js, _ := json.Marshal(u.Cache)
		t.Fatalf("reordered: usage.cache %s, want both chunks hit and tokens blended", js)
	}
	blended := *u.Cache.BlendedTokens

	// A mark that is not a boolean is a 400 naming it.
	_, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("?")}, MaxTokens: openai.Int(2)},
		option.WithJSONSet("messages.0.blend", "yes"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "messages[0].blend" {
		t.Errorf("blend \"yes\": have %v, want a 400 naming messages[0].blend", err)
	}

	// Anthropic: the same passages as text blocks marked blend (an extra field); Messages has
	// no cache_salt, so its chunks are cold here: computed at position 0, cached, blended.
	ac := anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("unused"), aoption.WithMaxRetries(0))
	msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{MaxTokens: 4,
		System: []anthropic.TextBlockParam{{Text: "Answer from the passages."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(blendPassage(2)),
			anthropic.NewTextBlock(blendPassage(1)), anthropic.NewTextBlock("Which bridge is the oldest?"))}},
		aoption.WithJSONSet("messages.0.content.0.blend", true), aoption.WithJSONSet("messages.0.content.1.blend", true))
	if err != nil {
		t.Fatal(err)
	}
	au := usageOfRaw(t, msg.RawJSON())
	if b := au.Cache.Blend; b == nil || len(b.Chunks) != 2 || b.Chunks[0].Part != "messages[0].content[0]" || b.Chunks[1].Part != "messages[0].content[1]" || *au.Cache.BlendedTokens == 0 {
		js, _ := json.Marshal(au.Cache)
		t.Fatalf("messages: usage.cache %s, want both blocks named and tokens blended", js)
	}
	blended += *au.Cache.BlendedTokens

	// /metrics: the blended source and the recomputed counter.
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	metric := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("/metrics lacks %s", name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if got := metric(`stockpot_prompt_tokens_total{source="blended"}`); got != float64(blended) {
		t.Errorf("stockpot_prompt_tokens_total{source=\"blended\"} %v, want the usages' %d", got, blended)
	}
	if metric("stockpot_blend_recomputed_tokens_total") == 0 || metric(`stockpot_blend_chunks_total{outcome="hit"}`) != 2 || metric(`stockpot_blend_chunks_total{outcome="miss"}`) != 4 {
		t.Errorf("blend counters:\n%s", grepLines(string(body), "stockpot_blend_"))
	}
}

// TestBlendChunksFromDisk: chunks cached by one server and written down to its disk tier at a
// graceful stop are restored from disk by the next server on the same directory, for a
// request that blends them in another order: usage.cache names them restored from disk, and
// the answer is that of a server that had them on the device.
func TestBlendChunksFromDisk(t *testing.T) {
	chat := func(url string, a, b int) (string, blendUsage) {
		t.Helper()
		code, out := post(t, url+"/v1/chat/completions", map[string]any{
			"messages": []any{
				map[string]any{"role": "system", "content": "Answer from the passages."},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": blendPassage(a), "blend": true},
					map[string]any{"type": "text", "text": blendPassage(b), "blend": true},
					map[string]any{"type": "text", "text": "Which bridge is the oldest?"}}},
			},
			"max_tokens": 8, "temperature": 0,
		})
		if code != 200 {
			t.Fatalf("status %d: %s", code, out)
		}
		var r struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.Unmarshal(out, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%v: %s", err, out)
		}
		return r.Choices[0].Message.Content, usageOfRaw(t, string(out))
	}
	// The reference: both requests on one server, the chunks on its device.
	_, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm", offload.Config{})
	chat(url, 1, 2)
	want, wu := chat(url, 2, 1)
	stop()

	to := offload.Config{DiskDir: t.TempDir(), DiskBytes: 1 << 30}
	_, url, stop = tieredInstance(t, "synthetic:tiny-llama-spm", to)
	chat(url, 1, 2)
	stop() // graceful: the working pool, chunks included, is written back to disk
	_, url, stop = tieredInstance(t, "synthetic:tiny-llama-spm", to)
	defer stop()
	have, u := chat(url, 2, 1)
	if have != want {
		t.Errorf("chunks restored from disk: %q, with them on the device %q", have, want)
	}
	js, _ := json.Marshal(u.Cache)
	if u.Cache.DiskTokens == 0 || u.Cache.Blend == nil || len(u.Cache.Blend.Chunks) != 2 || *u.Cache.BlendedTokens != *wu.Cache.BlendedTokens {
		t.Fatalf("usage.cache %s: want the system prompt from disk and %d tokens blended", js, *wu.Cache.BlendedTokens)
	}
	for i, ch := range u.Cache.Blend.Chunks {
		if ch.HitTokens == 0 || ch.HitTokens != wu.Cache.Blend.Chunks[i].HitTokens || ch.RestoredTokens["disk"] != ch.HitTokens {
			t.Errorf("chunk %d of usage.cache %s: want its %d hit tokens all restored from disk", i, js, wu.Cache.Blend.Chunks[i].HitTokens)
		}
	}
}

// TestBlendResponsesMarks: the Responses API takes chat's marks through the official
// openai-go client (extra fields, option.WithJSONSet): "blend": true on input_text parts and
// on a whole input message, and the top-level blend object; at recompute 1 the answer is the
// unmarked request's, the usage names each chunk as input names it, and the chunks are found
// again in another order.
func TestBlendResponsesMarks(t *testing.T) {
	url := agentInstance(t, true)
	ctx := context.Background()
	oc := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ask := func(input responses.ResponseInputParam, opts ...option.RequestOption) (string, blendUsage) {
		t.Helper()
		r, err := oc.Responses.New(ctx, responses.ResponseNewParams{
			Instructions:    openai.String("Answer from the passages."),
			Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: input},
			MaxOutputTokens: openai.Int(8), Temperature: openai.Float(0), Store: openai.Bool(false),
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r.OutputText(), usageOfRaw(t, r.RawJSON())
	}
	parts := func(a, b int) responses.ResponseInputParam {
		return responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
			responses.ResponseInputContentParamOfInputText(blendPassage(a)), responses.ResponseInputContentParamOfInputText(blendPassage(b)),
			responses.ResponseInputContentParamOfInputText("Which bridge is the oldest?")}, responses.EasyInputMessageRoleUser)}
	}
	marks := []option.RequestOption{option.WithJSONSet("input.0.content.0.blend", true), option.WithJSONSet("input.0.content.1.blend", true),
		option.WithJSONSet("cache_salt", "blend-responses")}

	want, _ := ask(parts(1, 2))
	have, u := ask(parts(1, 2), append(marks, option.WithJSONSet("blend", map[string]any{"recompute": 1}))...)
	if have != want {
		t.Errorf("recompute 1: %q, the unmarked request's %q", have, want)
	}
	b := u.Cache.Blend
	if b == nil || len(b.Chunks) != 2 || b.Chunks[0].Part != "input[0].content[0]" || b.Chunks[1].Part != "input[0].content[1]" ||
		*u.Cache.BlendedTokens != 0 || *u.Cache.BlendRecompute == 0 {
		js, _ := json.Marshal(u.Cache)
		t.Fatalf("usage.cache %s, want both parts named, nothing blended, chunk tokens recomputed", js)
	}
	_, u = ask(parts(2, 1), marks...)
	if b := u.Cache.Blend; b == nil || len(b.Chunks) != 2 || b.Chunks[0].HitTokens == 0 || b.Chunks[1].HitTokens == 0 || *u.Cache.BlendedTokens == 0 {
		js, _ := json.Marshal(u.Cache)
		t.Fatalf("reordered: usage.cache %s, want both chunks hit and tokens blended", js)
	}

	// A whole input message marked; the question in a message of its own.
	whole := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(blendPassage(1), responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage("Which bridge is the oldest?", responses.EasyInputMessageRoleUser)}
	_, u = ask(whole, option.WithJSONSet("input.0.blend", true), option.WithJSONSet("cache_salt", "blend-responses"))
	if b := u.Cache.Blend; b == nil || len(b.Chunks) != 1 || b.Chunks[0].Part != "input[0]" || b.Chunks[0].HitTokens == 0 {
		js, _ := json.Marshal(u.Cache)
		t.Fatalf("whole message: usage.cache %s, want input[0] named and found cached", js)
	}

	// A mark that is not a boolean is a 400 naming it.
	_, err := oc.Responses.New(ctx, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfInputItemList: parts(1, 2)}, MaxOutputTokens: openai.Int(2)},
		option.WithJSONSet("input.0.content.1.blend", "yes"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "input[0].content[1].blend" {
		t.Errorf("blend \"yes\": have %v, want a 400 naming input[0].content[1].blend", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestBenchRAGBlend: bench --workload rag --blend against serve: the full prefill reuses
// nothing, prefix caching reuses no chunk, blending at 0 blends the chunks, and every
// variant's sources (from the server's counters) sum to its prompt tokens.
func TestBenchRAGBlend(t *testing.T) {
	url := agentInstance(t, true)
	cfg := bench.DefaultConfig()
	cfg.Target, cfg.Workload, cfg.Sessions, cfg.Turns, cfg.DocTokens, cfg.QuestionTokens, cfg.MaxTokens = url, "rag", 1, 3, 192, 8, 2
	rs, err := bench.RunRAGBlend(context.Background(), cfg, []float64{0, 0.5}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	bench.WriteRAGBlend(&b, rs)
	t.Logf("\n%s", b.String())
	for _, r := range rs {
		if r.Failed > 0 || r.PromptTokens == 0 || r.PrefixTokens+r.BlendedTokens+r.ComputedTokens != r.PromptTokens {
			t.Errorf("%s: %+v, want every request answered and the sources summing to the prompt", r.Variant, r)
		}
	}
	if rs[0].PrefixTokens != 0 || rs[0].BlendedTokens != 0 || rs[1].BlendedTokens != 0 || rs[2].BlendedTokens == 0 || rs[3].RecomputedBlend == 0 {
		t.Errorf("variants %+v: want nothing reused by the full prefill, nothing blended without marks, chunks blended at 0 and recomputed at 0.5", rs)
	}
}
