package toolcall

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
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
	f.Fuzz(func(t *testing.T, text string, fam uint8, seed uint64) {
		family := allFamilies[int(fam)%len(allFamilies)]
		opts := Options{
			ParseReasoning:    seed&1 != 0,
			StartsInReasoning: seed&2 != 0,
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
			opts := Options{ParseReasoning: rng.IntN(2) == 0, StartsInReasoning: rng.IntN(3) == 0}
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
