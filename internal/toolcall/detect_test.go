package toolcall

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"stockpot/internal/llamaref"
)

// bundleTemplates reads every chat template of the llama.cpp source bundle.
func bundleTemplates(t *testing.T) map[string]string {
	t.Helper()
	files, err := llamaref.SourceFiles("models/templates")
	if err != nil {
		t.Fatalf("the llama.cpp source bundle holds the real chat templates: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		if !strings.HasSuffix(f, ".jinja") {
			continue
		}
		src, err := llamaref.SourceFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(path.Base(f), ".jinja")] = string(src)
	}
	return out
}

// wantFamily is the family of each bundle template whose syntax we know; every other
// template must come out None or be listed here.
var wantFamily = map[string]Family{
	"Qwen-Qwen2.5-7B-Instruct": Hermes,
	"Qwen-QwQ-32B":             Hermes,
	"Qwen-Qwen3-0.6B":          Hermes,
	"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": Hermes,
	"NousResearch-Hermes-3-Llama-3.1-8B-tool_use":   Hermes,
	"MiMo-VL":                                       Hermes,
	"ibm-granite-granite-4.0":                       Hermes,
	"ibm-granite-granite-4.1":                       Hermes,
	"Bielik-11B-v3.0-Instruct":                      Hermes,
	"Reka-Edge":                                     Hermes,
	"Qwen3-Coder":                                   Qwen3Coder,
	"Qwen3.5-4B":                                    Qwen3Coder,
	"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16":           Qwen3Coder,
	"StepFun3.5-Flash":                              Qwen3Coder,
	"GLM-4.6":                                       GLM,
	"GLM-4.7-Flash":                                 GLM,
	"poolside-Laguna-S-2.1":                         GLM,
	"poolside-Laguna-XS-2.1":                        GLM,
	"poolside-Laguna-XS.2":                          GLM,
	"meta-llama-Llama-3.1-8B-Instruct":              Llama3,
	"meta-llama-Llama-3.2-3B-Instruct":              Llama3,
	"meta-llama-Llama-3.3-70B-Instruct":             Llama3,
	"mistralai-Mistral-Nemo-Instruct-2407":          Mistral,
	"Mistral-Small-3.2-24B-Instruct-2506":           MistralArgs,
	"unsloth-mistral-Devstral-Small-2507":           MistralArgs,
	"mistralai-Ministral-3-14B-Reasoning-2512":      MistralArgs,
	"deepseek-ai-DeepSeek-R1-Distill-Llama-8B":      DeepSeekR1,
	"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B":      DeepSeekR1,
	"llama-cpp-deepseek-r1":                         DeepSeekR1,
	"deepseek-ai-DeepSeek-V3.1":                     DeepSeekV3,
	"moonshotai-Kimi-K2":                            Kimi,
	"Kimi-K2-Instruct":                              Kimi,
	"Kimi-K2-Thinking":                              Kimi,
	"Kimi-K3":                                       KimiK3,
	"MiniMax-M2":                                    MiniMax,
	"ibm-granite-granite-3.3-2B-Instruct":           Granite,
	"unsloth-Apriel-1.5":                            Apriel,
	"Apriel-1.6-15b-Thinker-fixed":                  Apriel,
	"fireworks-ai-llama-3-firefunction-v2":          Firefunction,
	"CohereForAI-c4ai-command-r7b-12-2024-tool_use": CommandR,
	"Cohere2MoE":                                    CommandR,
	"meetkai-functionary-medium-v3.1":               Functionary,
	// Templates with no tool syntax, or one this package does not parse (named so that a
	// change in detection shows).
	"HuggingFaceTB-SmolLM3-3B":                 None, // this copy of the template has no tool section
	"microsoft-Phi-3.5-mini-instruct":          None,
	"google-gemma-2-2b-it":                     None,
	"openai-gpt-oss-120b":                      None, // harmony channels: out of scope
	"deepseek-ai-DeepSeek-V3.2":                None, // DSML markup: not parsed here
	"MiniMax-M3":                               None,
	"CohereForAI-c4ai-command-r-plus-tool_use": None,
}

// TestDetectBundleTemplates runs Detect over every template in the bundle, checks the
// ones named in wantFamily and prints the whole table.
func TestDetectBundleTemplates(t *testing.T) {
	tmpls := bundleTemplates(t)
	names := make([]string, 0, len(tmpls))
	for n := range tmpls {
		names = append(names, n)
	}
	sort.Strings(names)
	var table strings.Builder
	fmt.Fprintf(&table, "%-48s %-14s %-9s %s\n", "template", "family", "reasoning", "strips reasoning")
	for _, n := range names {
		ti := Inspect(tmpls[n])
		fmt.Fprintf(&table, "%-48s %-14s %-9v %v\n", n, ti.Family, ti.Reasoning, ti.StripsReasoning)
		if want, ok := wantFamily[n]; ok && ti.Family != want {
			t.Errorf("%s: Detect = %s, want %s", n, ti.Family, want)
		}
	}
	for n := range wantFamily {
		if _, ok := tmpls[n]; !ok {
			t.Errorf("%s: named in wantFamily but not in the bundle", n)
		}
	}
	t.Logf("detection over %d bundle templates:\n%s", len(names), table.String())

	// Spot checks of the informational fields.
	for n, want := range map[string]Template{
		"Qwen-Qwen3-0.6B":                          {Family: Hermes, Reasoning: true, StripsReasoning: true},
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {Family: DeepSeekR1, Reasoning: true, StripsReasoning: true},
		"Kimi-K2-Thinking":                         {Family: Kimi, Reasoning: true, StripsReasoning: true},
		"meta-llama-Llama-3.1-8B-Instruct":         {Family: Llama3},
	} {
		if got := Inspect(tmpls[n]); got != want {
			t.Errorf("%s: Inspect = %+v, want %+v", n, got, want)
		}
	}
}

// TestBundleTemplatesRoundTrip is the oracle: each template renders an assistant turn
// with a tool call the way its model was trained to write it, and Parse must read that
// text back as the same call. The turn is what the rendering with the call adds to the
// rendering of the prompt alone (the way llama.cpp's template analysis finds it).
func TestBundleTemplatesRoundTrip(t *testing.T) {
	tmpls := bundleTemplates(t)
	tool := map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Get the weather for a city.",
		"parameters": map[string]any{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
			"required":   []any{"city"},
		},
	}}
	args := map[string]any{"city": "Paris", "days": 3}
	wantArgs := `{"city":"Paris","days":3}`
	opts := Options{
		Tools:          []Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}`)}},
		ParseReasoning: true,
	}
	user := map[string]any{"role": "user", "content": "What is the weather in Paris for 3 days?"}

	// Templates whose rendering must parse back (the others are logged).
	mustPass := map[string]bool{}
	for n, f := range wantFamily {
		if f != None {
			mustPass[n] = true
		}
	}
	// Known exceptions, with why.
	for _, n := range []string{
		"ibm-granite-granite-3.3-2B-Instruct", // renders no tool_calls of earlier turns at all
	} {
		delete(mustPass, n)
	}

	names := make([]string, 0, len(tmpls))
	for n := range tmpls {
		names = append(names, n)
	}
	sort.Strings(names)
	var table strings.Builder
	for _, n := range names {
		f := Detect(tmpls[n])
		if f == None {
			continue
		}
		// Templates differ in what an assistant turn with calls looks like (content "" or
		// none, arguments a mapping or a JSON string); a template passes if one shape does.
		var turn string
		var r Result
		ok, rendered := false, false
		var errs []string
		for _, shape := range []struct {
			content any
			args    any
		}{{"", args}, {nil, args}, {nil, wantArgs}, {"", wantArgs}} {
			call := map[string]any{"id": "abc123xyz", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": shape.args}}
			assistant := map[string]any{"role": "assistant", "content": shape.content, "tool_calls": []any{call}}
			prompt, err1 := render(tmpls[n], []any{user}, []any{tool}, true)
			full, err2 := render(tmpls[n], []any{user, assistant}, []any{tool}, false)
			if err1 != nil || err2 != nil {
				errs = append(errs, fmt.Sprint(err1, err2))
				continue
			}
			rendered = true
			var prefix string
			prefix, turn = assistantTurn(prompt, full)
			o := opts
			o.StartsInReasoning = startsInReasoning(f, prompt, prefix, turn)
			r = Parse(f, turn, withIDs(o))
			ok = len(r.Calls) == 1 && r.Calls[0].Name == "get_weather" && sameJSON(r.Calls[0].Arguments, wantArgs) &&
				strings.TrimSpace(r.Content) == ""
			if ok {
				break
			}
		}
		if !rendered {
			fmt.Fprintf(&table, "%-48s %-13s render: %v\n", n, f, errs)
			if mustPass[n] {
				t.Errorf("%s: render: %v", n, errs)
			}
			continue
		}
		fmt.Fprintf(&table, "%-48s %-13s ok=%-5v %q\n", n, f, ok, turn)
		if !ok && mustPass[n] {
			t.Errorf("%s (%s): the template's own call does not parse back:\nturn %q\ngot %s", n, f, turn, renderResult(r))
		}
	}
	t.Logf("template-rendered calls:\n%s", table.String())
}

func render(src string, msgs, tools []any, addGen bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("render panicked: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(map[string]any{
		"messages": msgs, "tools": tools, "add_generation_prompt": addGen,
		"bos_token": "<BOS>", "eos_token": "<EOS>",
	})
}

// turnEnds are the end-of-turn texts templates write after an assistant turn; the model
// ends its generation on them, so they never reach the parser.
var turnEnds = []string{"<EOS>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<｜end▁of▁sentence｜>",
	"<|END_OF_TURN_TOKEN|>", "<|end_of_text|>", "<|end|>", "<|endoftext|>", "[e~[", "<sep>",
	"</assistant>", "<seed:eos>"}

// assistantTurn splits full into the prompt part it shares with prompt and the assistant's
// turn after it (up to the end of the turn). The shared part is cut back to a place
// between markers (after '>', ']' or a newline), so that the turn does not start inside
// one: prompts that open <think> share "<t" with a turn that starts "<tool_call>".
func assistantTurn(prompt, full string) (string, string) {
	i := 0
	for i < len(prompt) && i < len(full) && prompt[i] == full[i] {
		i++
	}
	if i < len(prompt) {
		i = strings.LastIndexAny(full[:i], ">]\n") + 1
	}
	turn := full[i:]
	end := len(turn)
	for _, e := range turnEnds {
		if j := strings.Index(turn, e); j >= 0 && j < end {
			end = j
		}
	}
	return full[:i], turn[:end]
}

// startsInReasoning: the turn starts inside reasoning when the shared prompt part opened
// it, or when the generation prompt did and the rendered turn closes it (templates such as
// GLM 4.7 render "</think>" for a turn whose prompt opened "<think>").
func startsInReasoning(f Family, prompt, prefix, turn string) bool {
	if PromptOpensReasoning(f, prefix) {
		return true
	}
	if !PromptOpensReasoning(f, prompt) {
		return false
	}
	i, _ := indexAny(turn, syntaxOf(f).thinkClose)
	return i >= 0
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func TestPromptOpensReasoning(t *testing.T) {
	for _, c := range []struct {
		f      Family
		prompt string
		want   bool
	}{
		{Hermes, "<|im_start|>assistant\n<think>\n", true},
		{Hermes, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{Hermes, "<|im_start|>assistant\n", false},
		{Hermes, "<think>a</think>b<|im_start|>assistant\n", false},
		{DeepSeekR1, "<｜Assistant｜><think>\n", true},
		{KimiK3, `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`, true},
		{KimiK3, `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`, false},
		{MistralArgs, "[THINK]", true},
		{None, "<think>", true},
	} {
		if got := PromptOpensReasoning(c.f, c.prompt); got != c.want {
			t.Errorf("PromptOpensReasoning(%s, %q) = %v, want %v", c.f, c.prompt, got, c.want)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, f := range append([]Family{None}, Families...) {
		if got, ok := Lookup(string(f)); !ok || got != f {
			t.Errorf("Lookup(%q) = %q, %v", f, got, ok)
		}
		if _, ok := syntaxes[f]; !ok {
			t.Errorf("%s has no syntax", f)
		}
	}
	if _, ok := Lookup("gpt-oss"); ok {
		t.Errorf("Lookup of an unknown family is ok")
	}
}
