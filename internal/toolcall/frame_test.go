package toolcall

import "testing"

// TestFrameParsesBack: what constrained decoding makes (the frame around Format's calls,
// or around a JSON document) parses back to just those calls, or just that content, for
// every family, whether the prompt opened a reasoning block or not and whether the
// request's tools are parsed or not.
func TestFrameParsesBack(t *testing.T) {
	for _, f := range allFamilies {
		syn := syntaxOf(f)
		prompts := []string{"<|im_start|>assistant\n"}
		if len(syn.thinkOpen) > 0 {
			prompts = append(prompts, "<|im_start|>assistant\n"+syn.thinkOpen[0])
		}
		if f == KimiK3 {
			prompts = []string{`<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`, `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`}
		}
		for _, prompt := range prompts {
			// As the server sets it: a family without reasoning markers never starts in one.
			starts := PromptOpensReasoning(f, prompt)
			fr := FrameOf(f, prompt, starts)
			opts := Options{Tools: fuzzTools, ParseReasoning: true, StartsInReasoning: starts}
			if f != None {
				text := fr.CallsBefore + Format(f, fuzzCalls) + fr.CallsAfter
				r := checkStreaming(t, f, text, opts)
				if r.Content != "" || r.Reasoning != "" || len(r.Calls) != len(fuzzCalls) {
					t.Errorf("%s starts=%v: calls %q parsed as %s", f, starts, text, renderResult(r))
				}
			}
			const doc = `{"a": [1, "x"]}`
			text := fr.ContentBefore + doc + fr.ContentAfter
			for _, noCalls := range []bool{false, true} {
				o := opts
				o.NoCalls = noCalls
				if r := checkStreaming(t, f, text, o); r.Content != doc || r.Reasoning != "" || len(r.Calls) != 0 {
					t.Errorf("%s starts=%v noCalls=%v: content %q parsed as %s", f, starts, noCalls, text, renderResult(r))
				}
			}
		}
	}
	// Kimi K3 after a prompt with no open channel (a continued turn): the answer opens
	// the response channel itself.
	fr := FrameOf(KimiK3, "", false)
	if r := Parse(KimiK3, fr.CallsBefore+Format(KimiK3, fuzzCalls)+fr.CallsAfter, withIDs(Options{ParseReasoning: true})); r.Content != "" || len(r.Calls) != 2 {
		t.Errorf("K3 without an open channel: %s", renderResult(r))
	}
}
