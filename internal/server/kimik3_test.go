package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
	"stockpot/internal/tokenizer"
	"stockpot/internal/toolcall"
)

// k3Tok is fakeTok with Kimi-K3's real template and its markup as control tokens, as a
// Kimi-K3 GGUF has them: <|open|>, <|sep|>, <|close|> (258-260) and <|end_of_msg|> (261,
// an end of generation). Tag names (think, response, tools) are plain bytes, as they are
// plain tokens in the real vocabulary. The template renders through internal/tokenizer,
// the same code the real tokenizer's ApplyChatTemplate runs.
type k3Tok struct{ fakeTok }

const (
	k3Open, k3Sep, k3Close, k3EndOfMsg = 258, 259, 260, 261
	k3Vocab                            = 262
)

var k3Specials = map[int32]string{k3Open: "<|open|>", k3Sep: "<|sep|>", k3Close: "<|close|>", k3EndOfMsg: "<|end_of_msg|>"}

func (k3Tok) VocabSize() int                           { return k3Vocab }
func (k3Tok) ChatTemplate(bool) string                 { return tokenizer.TemplateKimiK3 }
func (k3Tok) IsControl(id int32) bool                  { return id < 2 || id >= k3Open && id < k3Vocab }
func (k3Tok) IsEOG(id int32) bool                      { return id == fakeEOS || id == k3EndOfMsg }
func (k3Tok) EOGs() []int32                            { return []int32{k3EndOfMsg, fakeEOS} }
func (k3Tok) NewStreamDecoder() pipeline.StreamDecoder { return k3Stream{&fakeStream{}} }

func (t k3Tok) Piece(id int32) []byte {
	if s, ok := k3Specials[id]; ok {
		return []byte(s)
	}
	return t.fakeTok.Piece(id)
}

func (t k3Tok) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var ids []int32
	for text != "" {
		if parseSpecial {
			found := false
			for id, s := range k3Specials {
				if strings.HasPrefix(text, s) {
					ids, text, found = append(ids, id), text[len(s):], true
					break
				}
			}
			if found {
				continue
			}
		}
		n := 1
		if parseSpecial {
			if i := strings.Index(text[1:], "<|"); i >= 0 {
				n = i + 1
			} else {
				n = len(text)
			}
		}
		ids = append(ids, t.fakeTok.Encode(text[:n], false, parseSpecial)...)
		text = text[n:]
	}
	if addSpecial {
		ids = append([]int32{fakeBOS}, ids...)
	}
	return ids
}

func (t k3Tok) Decode(ids []int32) string {
	var plain []int32
	for _, id := range ids {
		if id < k3Open {
			plain = append(plain, id)
		}
	}
	return t.fakeTok.Decode(plain)
}

func (t k3Tok) DecodeChecked(ids []int32) (string, error) {
	for _, id := range ids {
		if id < 0 || id >= k3Vocab {
			return t.fakeTok.DecodeChecked([]int32{id})
		}
	}
	return t.Decode(ids), nil
}

// text renders ids with control tokens as their text: the prompt as the template wrote it.
func (t k3Tok) text(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		b.Write(t.Piece(id))
	}
	return b.String()
}

func (k3Tok) ApplyChatTemplate(msgs []pipeline.Message, opts pipeline.ChatOptions) (string, error) {
	return tokenizer.RenderChatWith(tokenizer.TemplateKimiK3, pipeline.TemplateMessages(msgs), tokenizer.RenderOptions{
		Tools: opts.Tools, AddGenerationPrompt: opts.AddGenerationPrompt, Kwargs: opts.Kwargs}, "<s>", "</s>")
}

// k3Stream renders control tokens as nothing, as the real stream decoder does (the server
// adds their text where it wants it).
type k3Stream struct{ *fakeStream }

func (s k3Stream) Add(id int32) string {
	if id >= k3Open {
		return ""
	}
	return s.fakeStream.Add(id)
}

// k3Body is a chat request with room for a Kimi-K3 turn of byte-level tokens.
func k3Body(extra string) string {
	return `{"messages":[{"role":"user","content":"weather in Paris?"}],"max_tokens":1000` + extra + `}`
}

// k3Gen is a fake engine whose model writes text, its markup as k3Tok's control tokens.
func k3Gen(text string) *fakeGen {
	gen := newFakeGen("")
	gen.ids = k3Tok{}.Encode(text, false, true)
	return gen
}

// k3Turn is a whole Kimi-K3 turn after a generation prompt that opened the think channel:
// reasoning, an answer in the response channel, then two calls (typed argument tags, and
// a JSON block), the message's close and the end of the message.
const k3Turn = `The user wants weather.<|close|>think<|sep|><|open|>response<|sep|>Checking now.<|close|>response<|sep|>` +
	`<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris "Left Bank"<|close|>argument<|sep|><|close|>call<|sep|>` +
	`<|open|>call tool="get_weather" index="2"<|sep|><|open|>json type="object"<|sep|>{"city": "Oslo"}<|close|>json<|sep|><|close|>call<|sep|>` +
	`<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>`

var k3Cities = []string{`Paris "Left Bank"`, "Oslo"}

// noMarkup fails when any of Kimi K3's markup reached the client, raw or JSON-escaped.
func noMarkup(t *testing.T, how, body string) {
	t.Helper()
	for _, m := range []string{"<|", `\u003c|`, "|>", `|\u003e`, "end_of_msg"} {
		if strings.Contains(body, m) {
			t.Errorf("%s: markup %q reached the client: %s", how, m, body)
		}
	}
}

func checkK3Calls(t *testing.T, how string, names, args []string) {
	t.Helper()
	if len(names) != len(k3Cities) {
		t.Fatalf("%s: %d calls, want %d", how, len(names), len(k3Cities))
	}
	for i, city := range k3Cities {
		var a map[string]string
		if names[i] != "get_weather" || json.Unmarshal([]byte(args[i]), &a) != nil || len(a) != 1 || a["city"] != city {
			t.Errorf("%s: call %d is %s(%s), want get_weather with city %q", how, i, names[i], args[i], city)
		}
	}
}

// TestKimiK3ChatCompletions: a Kimi-K3 turn through /v1/chat/completions, whole and
// streamed: reasoning_content, content and tool_calls come back split, and none of the
// markup (channel tags, the message's close) reaches the client.
func TestKimiK3ChatCompletions(t *testing.T) {
	gen := k3Gen(k3Turn)
	s, _ := newTestServerTok(t, gen, k3Tok{}, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"tools":`+weatherTools))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	noMarkup(t, "whole", rec.Body.String())
	c := decode[api.ChatCompletionResponse](t, rec).Choices[0]
	m := c.Message
	if *c.FinishReason != "tool_calls" || m.ReasoningContent == nil || *m.ReasoningContent != "The user wants weather." ||
		m.Content == nil || *m.Content != "Checking now." {
		t.Errorf("whole: %s", rec.Body)
	}
	var names, args []string
	for _, tc := range m.ToolCalls {
		names, args = append(names, tc.Function.Name), append(args, tc.Function.Arguments)
	}
	checkK3Calls(t, "whole", names, args)

	// The prompt is the template's, ending in the open think channel.
	prompt := k3Tok{}.text(gen.lastRequest().Prompt)
	if !strings.HasSuffix(prompt, `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`) ||
		!strings.Contains(prompt, `<|open|>message role="system" type="tool-declare"<|sep|># Tools`) {
		t.Errorf("prompt %q", prompt)
	}

	for _, per := range []int{1, 5, 64} {
		gen.perOutput = per
		rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"tools":`+weatherTools+`,"stream":true`))
		noMarkup(t, "streamed", rec.Body.String())
		content, calls, finish := collectChat(t, rec.Body.String())
		reasoning := collectReasoning(t, rec.Body.String())
		if content != "Checking now." || reasoning != "The user wants weather." || finish != "tool_calls" {
			t.Errorf("streamed %d per step: content %q reasoning %q finish %q", per, content, reasoning, finish)
		}
		names, args = nil, nil
		for i := range len(calls) {
			names, args = append(names, calls[i].Function.Name), append(args, calls[i].Function.Arguments)
		}
		checkK3Calls(t, "streamed", names, args)
	}
}

// collectReasoning joins the reasoning_content deltas of a streamed chat answer.
func collectReasoning(t *testing.T, body string) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range sseEvents(t, body) {
		var c api.ChatCompletionChunk
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		if r := c.Choices[0].Delta.ReasoningContent; r != nil {
			b.WriteString(*r)
		}
	}
	return b.String()
}

// TestKimiK3WithoutTools: with no tools (and with tool_choice none) no calls are parsed,
// but the reasoning still splits from the answer and the channel tags are still not
// content: Kimi-K3's markup is control tokens, which reach the parser as text although no
// calls are parsed.
func TestKimiK3WithoutTools(t *testing.T) {
	const turn = "Simple.<|close|>think<|sep|><|open|>response<|sep|>Hello there!<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
	s, _ := newTestServerTok(t, k3Gen(turn), k3Tok{}, agentConfig)
	for _, extra := range []string{"", `,"tools":` + weatherTools + `,"tool_choice":"none"`} {
		rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(extra))
		noMarkup(t, "whole"+extra, rec.Body.String())
		m := decode[api.ChatCompletionResponse](t, rec).Choices[0].Message
		if m.ReasoningContent == nil || *m.ReasoningContent != "Simple." || m.Content == nil || *m.Content != "Hello there!" || len(m.ToolCalls) != 0 {
			t.Errorf("whole%s: %s", extra, rec.Body)
		}
		rec = do(s.Handler(), "POST", "/v1/chat/completions", k3Body(extra+`,"stream":true`))
		noMarkup(t, "streamed"+extra, rec.Body.String())
		content, calls, _ := collectChat(t, rec.Body.String())
		if r := collectReasoning(t, rec.Body.String()); content != "Hello there!" || r != "Simple." || len(calls) != 0 {
			t.Errorf("streamed%s: content %q reasoning %q calls %d", extra, content, r, len(calls))
		}
	}
	// With tool_choice none the call markup the model writes anyway is content, not a call.
	s, _ = newTestServerTok(t, k3Gen(`<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`), k3Tok{}, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"tools":`+weatherTools+`,"tool_choice":"none"`))
	if c := decode[api.ChatCompletionResponse](t, rec).Choices[0]; len(c.Message.ToolCalls) != 0 || *c.FinishReason != "stop" ||
		c.Message.Content == nil || !strings.HasPrefix(*c.Message.Content, "<|open|>tools<|sep|>") {
		t.Errorf("tool_choice none: %s", rec.Body)
	}
}

// TestKimiK3ThinkingOff: chat_template_kwargs thinking=false makes the template open the
// response channel instead, so the generation starts in the answer; thinking_effort reaches
// the template, and a value it refuses is a 400 quoting it.
func TestKimiK3ThinkingOff(t *testing.T) {
	gen := k3Gen("Hello.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>")
	s, _ := newTestServerTok(t, gen, k3Tok{}, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"chat_template_kwargs":{"thinking":false}`))
	noMarkup(t, "thinking off", rec.Body.String())
	m := decode[api.ChatCompletionResponse](t, rec).Choices[0].Message
	if m.ReasoningContent != nil || m.Content == nil || *m.Content != "Hello." {
		t.Errorf("thinking off: %s", rec.Body)
	}
	if p := (k3Tok{}).text(gen.lastRequest().Prompt); !strings.HasSuffix(p, `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`) {
		t.Errorf("thinking off: prompt %q", p)
	}
	do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"chat_template_kwargs":{"thinking_effort":"low"}`))
	if p := (k3Tok{}).text(gen.lastRequest().Prompt); !strings.Contains(p, "Now the system is invoked with `thinking_effort=low`.") {
		t.Errorf("thinking_effort low: prompt %q", p)
	}
	rec = do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"chat_template_kwargs":{"thinking_effort":"medium"}`))
	if e := decode[api.ErrorBody](t, rec); rec.Code != 400 || !strings.Contains(e.Error.Message, "Unsupported thinking_effort=medium") {
		t.Errorf("thinking_effort medium: %d %s", rec.Code, rec.Body)
	}
}

// TestKimiK3ToolHistory: an agent's next turn (the assistant's calls and the tool results,
// answered out of order) renders as the template renders it: the results in call order,
// named after the calls they answer.
func TestKimiK3ToolHistory(t *testing.T) {
	gen := k3Gen("Done.<|close|>think<|sep|><|open|>response<|sep|>Sunny.<|close|>response<|sep|><|close|>message<|sep|>")
	s, _ := newTestServerTok(t, gen, k3Tok{}, agentConfig)
	body := `{"max_tokens":50,"tools":` + weatherTools + `,"messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":"Checking.","reasoning_content":"Two cities.","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"c2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
		{"role":"tool","tool_call_id":"c2","content":"cold"},
		{"role":"tool","tool_call_id":"c1","content":"warm"}]}`
	rec := do(s.Handler(), "POST", "/v1/chat/completions", body)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	want := `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>Two cities.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>` +
		`<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|>` +
		`<|open|>call tool="get_weather" index="2"<|sep|><|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>` +
		`<|open|>message role="tool" tool="get_weather" index="1"<|sep|>warm<|close|>message<|sep|><|end_of_msg|>` +
		`<|open|>message role="tool" tool="get_weather" index="2"<|sep|>cold<|close|>message<|sep|><|end_of_msg|>` +
		`<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`
	if p := (k3Tok{}).text(gen.lastRequest().Prompt); !strings.HasSuffix(p, want) {
		t.Errorf("prompt %q\nwant it to end %q", p, want)
	}
	if m := decode[api.ChatCompletionResponse](t, rec).Choices[0].Message; m.Content == nil || *m.Content != "Sunny." || *m.ReasoningContent != "Done." {
		t.Errorf("answer %s", rec.Body)
	}
}

// TestKimiK3Constrained: tool_choice required and response_format constrain the output to
// the answer in Kimi-K3's own markup (the think channel the prompt opened closed at once,
// the answer in or after the response channel, the message closed), which the parser
// reads back; and a model that would write prose first is not allowed to.
func TestKimiK3Constrained(t *testing.T) {
	gen := k3Gen("")
	s, _ := newTestServerTok(t, gen, k3Tok{}, agentConfig)
	drive := func(how, text string) engine.Constraint {
		t.Helper()
		c := gen.lastRequest().Sampling.Constraint
		if c == nil {
			t.Fatalf("%s: no constraint", how)
		}
		mask := make([]uint64, (k3Vocab+63)/64)
		for i, id := range (k3Tok{}).Encode(text, false, true) {
			clear(mask)
			c.FillMask(mask)
			if mask[id/64]&(1<<(id%64)) == 0 {
				t.Fatalf("%s: token %d (%q) at %d not allowed after %q", how, id, (k3Tok{}).Piece(id), i, (k3Tok{}).text((k3Tok{}).Encode(text, false, true)[:i]))
			}
			if err := c.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
		if !c.Complete() {
			t.Errorf("%s: %q is not a whole answer", how, text)
		}
		return c
	}
	fr := toolcall.FrameOf(toolcall.KimiK3, `<|open|>think<|sep|>`, true)
	calls := fr.CallsBefore + toolcall.Format(toolcall.KimiK3, []toolcall.Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}) + fr.CallsAfter
	gen.ids = (k3Tok{}).Encode(calls, false, true)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"tools":`+weatherTools+`,"tool_choice":"required"`))
	drive("required", calls)
	c := decode[api.ChatCompletionResponse](t, rec).Choices[0]
	if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || c.Message.ReasoningContent != nil {
		t.Errorf("required: %s", rec.Body)
	}
	// Prose first is not an answer of calls: only the think channel's close may start it
	// (its control token, or the same text spelled in bytes).
	do(s.Handler(), "POST", "/v1/chat/completions", k3Body(`,"tools":`+weatherTools+`,"tool_choice":"required"`))
	mask := make([]uint64, (k3Vocab+63)/64)
	gen.lastRequest().Sampling.Constraint.FillMask(mask)
	for id := range int32(k3Vocab) {
		if allowed := mask[id/64]&(1<<(id%64)) != 0; allowed != (id == k3Close || string((k3Tok{}).Piece(id)) == "<") {
			t.Errorf("required: token %d (%q) allowed=%v at the start", id, (k3Tok{}).Piece(id), allowed)
		}
	}

	// response_format: the JSON sits in the response channel; thinking off, it starts there.
	for _, think := range []bool{true, false} {
		kw, prompt := "", `<|open|>think<|sep|>`
		if !think {
			kw, prompt = `,"chat_template_kwargs":{"thinking":false}`, `<|open|>response<|sep|>`
		}
		fr := toolcall.FrameOf(toolcall.KimiK3, prompt, think)
		doc := fr.ContentBefore + `{"city": "Rome"}` + fr.ContentAfter
		gen.ids = (k3Tok{}).Encode(doc, false, true)
		rec := do(s.Handler(), "POST", "/v1/chat/completions", k3Body(kw+`,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":`+
			`{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}}}`))
		drive("json_schema", doc)
		noMarkup(t, "json_schema", rec.Body.String())
		if m := decode[api.ChatCompletionResponse](t, rec).Choices[0].Message; m.Content == nil || *m.Content != `{"city": "Rome"}` || m.ReasoningContent != nil {
			t.Errorf("json_schema think=%v: %s", think, rec.Body)
		}
	}
}

// TestKimiK3Messages: the same turn through /v1/messages with anthropic-sdk-go: a thinking
// block, a text block and tool_use blocks, whole and streamed.
func TestKimiK3Messages(t *testing.T) {
	s, _ := newTestServerTok(t, k3Gen(k3Turn), k3Tok{}, agentConfig)
	c := anthropicClient(t, s)
	params := anthropic.MessageNewParams{Model: testModel, MaxTokens: 1000, Messages: userText("weather?"),
		Tools: []anthropic.ToolUnionParam{weatherTool}}
	check := func(how string, msg anthropic.Message) {
		t.Helper()
		noMarkup(t, how, msg.RawJSON())
		if len(msg.Content) != 4 || msg.StopReason != "tool_use" ||
			msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "The user wants weather." ||
			msg.Content[1].Type != "text" || msg.Content[1].Text != "Checking now." {
			t.Fatalf("%s: %s", how, msg.RawJSON())
		}
		var names, args []string
		for _, b := range msg.Content[2:] {
			if b.Type != "tool_use" || b.ID == "" {
				t.Errorf("%s: block %s", how, b.RawJSON())
			}
			names, args = append(names, b.Name), append(args, string(b.Input))
		}
		checkK3Calls(t, how, names, args)
	}
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	check("whole", *msg)
	stream := c.Messages.NewStreaming(context.Background(), params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("streamed", acc)
}

// TestKimiK3Responses: the same turn through /v1/responses with openai-go: a reasoning
// item, a message and function calls, whole and streamed.
func TestKimiK3Responses(t *testing.T) {
	s, _ := newTestServerTok(t, k3Gen(k3Turn), k3Tok{}, agentConfig)
	client := responsesClient(t, s)
	p := responses.ResponseNewParams{Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: weatherParams}}}}
	for _, stream := range []bool{false, true} {
		how := map[bool]string{false: "whole", true: "streamed"}[stream]
		r := respond(t, client, p, stream)
		noMarkup(t, how, r.RawJSON())
		var kinds, names, args []string
		var reasoning, text string
		for _, it := range r.Output {
			kinds = append(kinds, it.Type)
			switch it.Type {
			case "reasoning":
				for _, c := range it.Content {
					reasoning += c.Text
				}
			case "message":
				for _, c := range it.Content {
					text += c.Text
				}
			case "function_call":
				fc := it.AsFunctionCall()
				names, args = append(names, fc.Name), append(args, fc.Arguments)
			}
		}
		if strings.Join(kinds, ",") != "reasoning,message,function_call,function_call" || reasoning != "The user wants weather." || text != "Checking now." {
			t.Fatalf("%s: items %v reasoning %q text %q: %s", how, kinds, reasoning, text, r.RawJSON())
		}
		checkK3Calls(t, how, names, args)
	}
}
