package toolcall

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// cutCalls are two calls whose arguments Format writes back as they are (compact, keys in
// order), so that a cut call's arguments are a prefix of them.
var cutCalls = []Call{
	{Name: "get_weather", Arguments: `{"city":"Zürich \"q\"","days":31,"metric":true}`},
	{Name: "run", Arguments: `{"cmd":"ls <dir>"}`},
}

// cutFamilies are the families whose constrained calls Format writes as the grammar does:
// every JSON family, and Qwen3-Coder, whose tags are the grammar's for tagged arguments.
func cutFamilies() []Family {
	var out []Family
	for _, f := range Families {
		if env, _ := EnvelopeOf(f); env.ArgsAreJSON || f == Qwen3Coder {
			out = append(out, f)
		}
	}
	return out
}

// TestCutCallEveryPrefix cuts two formatted calls at every byte: a prefix that holds call
// j's whole beginning and not its whole end gives the calls before it, whole, then call j,
// named, with arguments that are a prefix of its own (whole once they are), the whole calls
// being Parse's; any other prefix gives no call.
func TestCutCallEveryPrefix(t *testing.T) {
	tools := fuzzTools
	for _, f := range cutFamilies() {
		env, _ := EnvelopeOf(f)
		calls := cutCalls
		if f == Qwen3Coder {
			// The tagged form cannot write '<' in a string value.
			calls = []Call{cutCalls[0], {Name: "run", Arguments: `{"cmd":"ls dir"}`}}
		}
		text := Format(f, calls)
		// begins[j]: where call j's arguments start; ends[j]: where its CallEnd ends.
		var begins, ends []int
		at := 0
		for j, c := range calls {
			b := env.CallBegin(c.Name, j)
			i := strings.Index(text[at:], b)
			if i < 0 {
				t.Fatalf("%s: call %d's beginning not in %q", f, j, text)
			}
			at += i + len(b)
			begins = append(begins, at)
			if env.ArgsAreJSON {
				at += strings.Index(text[at:], c.Arguments) + len(c.Arguments)
			}
			at += strings.Index(text[at:], env.CallEnd) + len(env.CallEnd)
			ends = append(ends, at)
		}
		opts := Options{Tools: tools, NewID: func() string { return "id" }}
		for n := 0; n <= len(text); n++ {
			prefix := text[:n]
			want := -1
			for j := range calls {
				if begins[j] <= n && n < ends[j] {
					want = j
				}
			}
			got, ok := CutCalls(f, prefix, "", opts)
			if want < 0 {
				if ok {
					t.Errorf("%s: cut at %d (%q): calls %+v, want none", f, n, prefix, got)
				}
				continue
			}
			if !ok || len(got) != want+1 {
				t.Errorf("%s: cut at %d (%q): %v calls %+v, want %d", f, n, prefix, ok, got, want+1)
				continue
			}
			for j, c := range got[:want] {
				id := "id"
				if f == Kimi {
					id = "functions." + calls[j].Name + ":" + strconv.Itoa(j)
				}
				if c != (Call{ID: id, Name: calls[j].Name, Arguments: calls[j].Arguments}) {
					t.Errorf("%s: cut at %d: whole call %d %+v, want %+v", f, n, j, c, calls[j])
				}
			}
			c := got[want]
			if c.Name != calls[want].Name || c.ID == "" || !strings.HasPrefix(calls[want].Arguments, c.Arguments) {
				t.Errorf("%s: cut at %d: call %+v, want a prefix of %+v", f, n, c, calls[want])
			}
			// Parse finds the same whole calls, or none for calls written as one JSON unit
			// (an array, or Llama 3's whole message) cut short.
			whole := Parse(f, prefix, opts).Calls
			if len(whole) != want && (len(whole) != 0 || !strings.Contains(env.SectionEnd, "]") && f != Llama3) {
				t.Errorf("%s: cut at %d (%q): Parse has %d whole calls, CutCalls %d", f, n, prefix, len(whole), want)
			}
			if m := WholeMembers(c.Arguments); !json.Valid([]byte(m)) || !strings.HasPrefix(m, "{") {
				t.Errorf("%s: cut at %d: WholeMembers(%q) = %q", f, n, c.Arguments, m)
			}
		}
	}
}

// TestCutCallFrame: the frame's text before the calls is skipped, and a text that does not
// start with it is not a cut call.
func TestCutCallFrame(t *testing.T) {
	before := "</think>\n\n"
	text := before + "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"cmd\": \"l"
	calls, ok := CutCalls(Hermes, text, before, Options{Tools: fuzzTools})
	if !ok || len(calls) != 1 || calls[0].Name != "run" || calls[0].Arguments != `{"cmd": "l` || !strings.HasPrefix(calls[0].ID, "call_") {
		t.Errorf("got %v %+v", ok, calls)
	}
	if _, ok := CutCalls(Hermes, text[len(before):], before, Options{Tools: fuzzTools}); ok {
		t.Error("a text without the frame's start read as a cut call")
	}
	// Kimi K2 writes the id itself.
	k2 := "<|tool_calls_section_begin|><|tool_call_begin|>functions.run:0<|tool_call_argument_begin|>{\"cmd"
	if calls, ok := CutCalls(Kimi, k2, "", Options{Tools: fuzzTools}); !ok || calls[0].ID != "functions.run:0" || calls[0].Arguments != `{"cmd` {
		t.Errorf("kimi: %v %+v", ok, calls)
	}
	// A tool the request did not offer is no call.
	if _, ok := CutCalls(Hermes, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {", "", Options{Tools: fuzzTools}); ok {
		t.Error("a call of a tool not offered")
	}
}

func TestCutCallTaggedTypes(t *testing.T) {
	begin := "<tool_call>\n<function=get_weather>\n"
	for _, tc := range []struct{ text, want string }{
		{"", ""},
		{"<param", "{"},
		{"<parameter=days>\n3", `{"days":3`},
		{"<parameter=days>\n31\n</parameter>\n<parameter=city>\nZü", `{"days":31,"city":"Zü`},
		{"<parameter=city>\nsay \"hi\"\n</para", `{"city":"say \"hi\"`},
		{"<parameter=city>\nX\n</parameter>\n</func", `{"city":"X"}`},
	} {
		calls, ok := CutCalls(Qwen3Coder, begin+tc.text, "", Options{Tools: fuzzTools})
		if !ok || calls[0].Arguments != tc.want {
			t.Errorf("%q: %v %+v, want %q", tc.text, ok, calls, tc.want)
		}
	}
}

func TestWholeMembers(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, `{}`},
		{`[1`, `{}`},
		{`{`, `{}`},
		{`{"a": 1, "b": "x y", "c": tr`, `{"a":1,"b":"x y"}`},
		{`{"a": 12`, `{}`},
		{`{"a": 12,`, `{"a":12}`},
		{`{"a": "done"`, `{"a":"done"}`},
		{`{"a": {"b": [1, 2]}, "c": "Par`, `{"a":{"b":[1,2]}}`},
		{`{"a": 1}`, `{"a":1}`},
	} {
		if got := WholeMembers(tc.in); got != tc.want {
			t.Errorf("WholeMembers(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzCutCalls: for any text and family, CutCalls does not panic and a call it finds names an
// offered tool; WholeMembers of its arguments, and of any text, is a JSON object.
func FuzzCutCalls(f *testing.F) {
	for i, fam := range allFamilies {
		text := Format(fam, fuzzCalls)
		for _, n := range []int{len(text) / 3, len(text) / 2, len(text) - 2} {
			if n > 0 {
				f.Add(text[:n], uint8(i))
			}
		}
	}
	f.Add("<tool_call>\n<function=run>\n<parameter=cmd>\nl", uint8(2))
	f.Add(`{"a": {"b": [1, 2]}, "c": tr`, uint8(1))
	f.Fuzz(func(t *testing.T, text string, fam uint8) {
		family := allFamilies[int(fam)%len(allFamilies)]
		calls, ok := CutCalls(family, text, "", Options{Tools: fuzzTools})
		if ok != (len(calls) > 0) {
			t.Fatalf("ok %v with %d calls", ok, len(calls))
		}
		for _, c := range calls {
			if c.Name != "get_weather" && c.Name != "run" || c.ID == "" {
				t.Fatalf("call %+v", c)
			}
			if m := WholeMembers(c.Arguments); !json.Valid([]byte(m)) || m[0] != '{' {
				t.Fatalf("WholeMembers(%q) = %q", c.Arguments, m)
			}
		}
		if m := WholeMembers(text); !json.Valid([]byte(m)) || m[0] != '{' {
			t.Fatalf("WholeMembers(%q) = %q", text, m)
		}
	})
}
