package toolcall

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var allFamilies = append([]Family{None}, Families...)

var fuzzTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"metric":{"type":"boolean"},"meta":{"type":"object"}}}`)},
	{Name: "run", Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`)},
}

var fuzzCalls = []Call{
	{ID: "functions.get_weather:0", Name: "get_weather", Arguments: `{"city":"Zürich \"q\"","days":3,"metric":true,"meta":{"a":[1,2]}}`},
	{ID: "functions.run:1", Name: "run", Arguments: `{"cmd":"ls <dir> && echo '}'"}`},
}

// FuzzParse: for any text, family, options and chunking, Parse does not panic, every
// call it returns has a name and JSON-object arguments, and the streamed result equals
// Parse.
func FuzzParse(f *testing.F) {
	for i, fam := range allFamilies {
		text := Format(fam, fuzzCalls)
		f.Add(text, uint8(i), uint64(1))
		f.Add("Sure.\n\n"+text+"\nDone.", uint8(i), uint64(2))
		f.Add("<think>\nhmm\n</think>\n"+text, uint8(i), uint64(3))
		if len(text) > 8 {
			f.Add(text[:len(text)/2], uint8(i), uint64(4))
			f.Add(text[:len(text)-3]+"x"+text[len(text)-2:], uint8(i), uint64(5))
		}
	}
	f.Add("<tool_call>\n{\"name\": \"run\", \"arguments\": {\"cmd\": \"x\"}}\n</tool_call>", uint8(1), uint64(0))
	f.Add("{\"name\": \"run\", \"parameters\": {}}; {\"name\": \"run\"}", uint8(4), uint64(7))
	f.Add("<|python_tag|>run.call(cmd='a\\'b', n=-1.5e3, ok=True)", uint8(4), uint64(8))
	f.Add("é\xff<tool_call><function=run><parameter=cmd>\n\xe2\x82\n</parameter></function></tool_call>", uint8(2), uint64(9))
	// Kimi K3: a whole turn after a prompt that opened the think channel (family 10).
	k3 := "Plan.<|close|>think<|sep|><|open|>response<|sep|>Ok.<|close|>response<|sep|><|open|>tools<|sep|>" +
		`<|open|>call tool="run" index="1"<|sep|><|open|>argument key="cmd" type="string"<|sep|>ls &amp; "x"<|close|>argument<|sep|><|close|>call<|sep|>` +
		`<|open|>call tool="get_weather" index="2"<|sep|><|open|>json type="object"<|sep|>{"days": 2}<|close|>json<|sep|><|close|>call<|sep|>` +
		"<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
	f.Add(k3, uint8(10), uint64(3|4))
	f.Add(k3, uint8(10), uint64(3|8))
	f.Add(k3[:len(k3)/2], uint8(10), uint64(3))
	f.Fuzz(func(t *testing.T, text string, fam uint8, seed uint64) {
		family := allFamilies[int(fam)%len(allFamilies)]
		opts := Options{
			ParseReasoning:    seed&1 != 0,
			StartsInReasoning: seed&2 != 0,
			NoCalls:           seed&8 != 0,
		}
		if seed&4 != 0 {
			opts.Tools = fuzzTools
		}
		want := Parse(family, text, withIDs(opts))
		checkCalls(t, want)

		rng := rand.New(rand.NewPCG(seed, uint64(len(text))))
		var cuts []int
		for i := 1; i < len(text); i++ {
			if rng.IntN(3) == 0 {
				cuts = append(cuts, i)
			}
		}
		if got := parseChunks(t, family, text, opts, cuts); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %+v: cuts %v of %q:\n got %+v\nwant %+v", family, opts, cuts, text, got, want)
		}
		var bytes []int
		for i := 1; i < len(text); i++ {
			bytes = append(bytes, i)
		}
		if got := parseChunks(t, family, text, opts, bytes); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %+v: single bytes of %q:\n got %+v\nwant %+v", family, opts, text, got, want)
		}
	})
}

// TestFormatRoundTrip: Parse reads Format's text back as the calls, for every family.
func TestFormatRoundTrip(t *testing.T) {
	for _, f := range Families {
		text := Format(f, fuzzCalls)
		r := checkStreaming(t, f, text, Options{Tools: fuzzTools, ParseReasoning: true})
		if r.Content != "" || r.Reasoning != "" || len(r.Calls) != len(fuzzCalls) {
			t.Errorf("%s: %q parsed as %s", f, text, renderResult(r))
			continue
		}
		for i, c := range fuzzCalls {
			got := r.Calls[i]
			if got.Name != c.Name || got.Arguments != c.Arguments {
				t.Errorf("%s: call %d: formatted %+v, parsed back %+v from %q", f, i, c, got, text)
			}
			if f == Kimi && got.ID != c.ID {
				t.Errorf("%s: call %d: id %q, want the model's %q", f, i, got.ID, c.ID)
			}
		}
	}
	if got := Format(None, fuzzCalls); got != "" {
		t.Errorf("Format(None) = %q, want nothing", got)
	}
	if _, ok := EnvelopeOf(None); ok {
		t.Errorf("EnvelopeOf(None) is ok")
	}
}

// TestCallsStreamEarly: a call comes out as soon as its text is whole, not at Finish
// (Llama 3's bare JSON excepted: only the end of the message makes it a call).
func TestCallsStreamEarly(t *testing.T) {
	for _, f := range Families {
		if f == Llama3 {
			continue
		}
		text := Format(f, fuzzCalls)
		for _, chunk := range []int{1, 3, 64} {
			p := NewParser(f, Options{Tools: fuzzTools, NewID: counterIDs()})
			var ds []Delta
			for i := 0; i < len(text); i += chunk {
				ds = append(ds, p.Feed(text[i:min(i+chunk, len(text))])...)
			}
			ds = append(ds, p.Feed(" Next.")...)
			if got := len(Collect(ds).Calls); got != len(fuzzCalls) {
				t.Errorf("%s, chunks of %d: %d of %d calls out before Finish", f, chunk, got, len(fuzzCalls))
			}
		}
	}
}

// TestRandomMarkerSoup builds texts out of the family's own pieces (markers and their
// prefixes, formatted calls cut anywhere, JSON bits, reasoning markers, whitespace),
// where streaming bugs live, and checks each streamed at every split against Parse.
func TestRandomMarkerSoup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 60
	if testing.Short() {
		n = 20
	}
	withCalls := 0
	for _, f := range allFamilies {
		syn := syntaxOf(f)
		var pieces []string
		add := func(ss ...string) {
			for _, s := range ss {
				pieces = append(pieces, s)
				if len(s) > 1 {
					pieces = append(pieces, s[:1+rng.IntN(len(s)-1)])
				}
			}
		}
		add(syn.texts...)
		add(syn.thinkOpen...)
		add(syn.thinkClose...)
		for _, m := range syn.markers {
			add(m.sectionEnd...)
		}
		formatted := Format(f, fuzzCalls)
		add(formatted, Format(f, fuzzCalls[:1]))
		for range 4 {
			if formatted != "" {
				i, j := rng.IntN(len(formatted)), rng.IntN(len(formatted))
				add(formatted[min(i, j):max(i, j)])
			}
		}
		add(" ", "\n", "\n\n", "text", "é", "{", "}", "[", "]", `"`, `{"name": "run", "arguments": {}}`, "<", ">", "|", "｜")
		for range n {
			var b strings.Builder
			for k := 1 + rng.IntN(8); k > 0; k-- {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			text := b.String()
			opts := Options{ParseReasoning: rng.IntN(2) == 0, StartsInReasoning: rng.IntN(3) == 0, NoCalls: rng.IntN(4) == 0}
			if rng.IntN(2) == 0 {
				opts.Tools = fuzzTools
			}
			if r := checkStreaming(t, f, text, opts); len(r.Calls) > 0 {
				withCalls++
			}
		}
	}
	// The soup must exercise calls, not only content.
	if withCalls < len(allFamilies)*n/10 {
		t.Errorf("only %d of %d texts held a call", withCalls, len(allFamilies)*n)
	}
	t.Logf("%d of %d texts held a call", withCalls, len(allFamilies)*n)
}

// FuzzKimiK3Arguments: an argument as Kimi K3's template writes it (the key escaped in its
// attribute, a string raw, any other JSON value as JSON with its type named) parses back
// to the same key and value, whole and streamed. Only what the template cannot write is
// left out: a key holding the <| of a tag, a value holding the argument's closing tag.
func FuzzKimiK3Arguments(f *testing.F) {
	f.Add("city", "Paris", false)
	f.Add(`a "q" & b`, "\n x \"y\" &amp; <b> <|open|>", false)
	f.Add("&quot;", "&amp;quot;", false)
	f.Add("n", `[1, {"a": null}]`, true)
	f.Add("t", "true", true)
	f.Add("s", `"quoted"`, true)
	f.Add("x", " -1.5e3 ", true)
	f.Fuzz(func(t *testing.T, key, value string, asJSON bool) {
		if key == "" || strings.Contains(key, "<|") || strings.Contains(value, "<|close|>argument<|sep|>") ||
			!utf8.ValidString(key) || !utf8.ValidString(value) {
			return
		}
		typ, text, want := "string", value, any(value)
		if asJSON {
			if json.Unmarshal([]byte(value), &want) != nil {
				return
			}
			switch v := want.(type) {
			case string:
				text = v // the template writes strings raw
			case nil:
				typ = "null"
			case bool:
				typ = "boolean"
			case float64:
				typ = "number"
			case map[string]any:
				typ = "object"
			case []any:
				typ = "array"
			}
		}
		call := `<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="` + k3Escape(key) +
			`" type="` + typ + `"<|sep|>` + text + `<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`
		r := Parse(KimiK3, call, withIDs(Options{}))
		if len(r.Calls) != 1 || r.Content != "" {
			t.Fatalf("%q parsed as %s", call, renderResult(r))
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(r.Calls[0].Arguments), &got); err != nil {
			t.Fatalf("arguments %q: %v", r.Calls[0].Arguments, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[key], want) {
			t.Fatalf("%q: arguments %s, want {%q: %#v}", call, r.Calls[0].Arguments, key, want)
		}
		rng := rand.New(rand.NewPCG(uint64(len(key)), uint64(len(value))))
		var cuts []int
		for i := 1; i < len(call); i++ {
			if rng.IntN(5) == 0 {
				cuts = append(cuts, i)
			}
		}
		if s := parseChunks(t, KimiK3, call, Options{}, cuts); !reflect.DeepEqual(s, r) {
			t.Fatalf("streamed %+v, whole %+v", s, r)
		}
	})
}
