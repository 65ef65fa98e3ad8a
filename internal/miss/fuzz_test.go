package miss

import "testing"

// FuzzExplain: the text half runs on clients' prompts; whatever the two texts are and
// wherever they part, it names a cause without panicking, and the offsets stay in range.
func FuzzExplain(f *testing.F) {
	f.Add("Today is 2026-11-30T09:12:44Z, go.", "Today is 2026-12-01T10:40:31Z, go.", 3)
	f.Add(`[{"name":"a","x":1},{"name":"b"}]`, `[{"name":"b"},{"name":"a","x":1}]`, 1)
	f.Add("a  b\n", "a b\n", 0)
	f.Add("<|im_start|>x", "<think></think>x", 2)
	f.Add(`{"a":[1,{"b":"\"}"}]`, `{"a":[1,{"b":"\"]"}]`, 0)
	f.Fuzz(func(t *testing.T, p, c string, blockTokens int) {
		bs := 4
		pt, ct := testText.encode(p), testText.encode(c)
		base := (blockTokens % 8) * bs
		if base < 0 {
			base = -base
		}
		prompt := append(make([]int32, 0, base+len(pt)), make([]int32, base)...)
		for i := range base {
			prompt[i] = 'x'
		}
		prompt = append(prompt, pt...)
		shared := 0
		for shared < len(pt) && shared < len(ct) && pt[shared] == ct[shared] {
			shared++
		}
		ev := Evidence{Block: base / bs, Offset: base + shared, Matched: base, Cached: ct, BlockSize: bs}
		r := Explain(ev, prompt, []Segment{{Kind: "system", Token: 0}}, testText)
		if r.Cause == "" {
			t.Fatalf("no cause for %q vs %q", p, c)
		}
		if r.Offset != ev.Offset || r.Block != ev.Block {
			t.Fatalf("report %+v moved the evidence %+v", r, ev)
		}
	})
}
