package toolcall

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cockroachdb/datadriven"
)

// counterIDs numbers calls call_1, call_2, … so that every run of one text gets the
// same ids.
func counterIDs() func() string {
	n := 0
	return func() string { n++; return "call_" + strconv.Itoa(n) }
}

// parseChunks feeds text to a Parser in the pieces cuts makes and collects the result,
// checking the rules every delta must keep.
func parseChunks(t testing.TB, f Family, text string, opts Options, cuts []int) Result {
	t.Helper()
	opts.NewID = counterIDs()
	p := NewParser(f, opts)
	var ds []Delta
	prev := 0
	for _, c := range cuts {
		ds = append(ds, p.Feed(text[prev:c])...)
		prev = c
	}
	ds = append(ds, p.Feed(text[prev:])...)
	ds = append(ds, p.Finish()...)
	checkDeltas(t, ds)
	if utf8.ValidString(text) {
		for _, d := range ds {
			if !utf8.ValidString(d.Content) || !utf8.ValidString(d.Reasoning) {
				t.Fatalf("a delta splits a character: %+v", d)
			}
		}
	}
	return Collect(ds)
}

// checkDeltas: one field per delta; a call opens with its index, id and name and no
// arguments, and is never reopened.
func checkDeltas(t testing.TB, ds []Delta) {
	t.Helper()
	opened := map[int]bool{}
	next := 0
	for _, d := range ds {
		set := 0
		if d.Content != "" {
			set++
		}
		if d.Reasoning != "" {
			set++
		}
		if d.Call != nil {
			set++
			c := d.Call
			if !opened[c.Index] {
				if c.Index != next || c.ID == "" || c.Name == "" || c.Arguments != "" {
					t.Fatalf("call opened badly: %+v (next index %d)", *c, next)
				}
				opened[c.Index] = true
				next++
			} else if c.ID != "" || c.Name != "" {
				t.Fatalf("call %d reopened: %+v", c.Index, *c)
			}
		}
		if set != 1 {
			t.Fatalf("delta with %d fields set: %+v", set, d)
		}
	}
}

// checkCalls: every call has a name and JSON-object arguments.
func checkCalls(t testing.TB, r Result) {
	t.Helper()
	for i, c := range r.Calls {
		var obj map[string]json.RawMessage
		if c.Name == "" || c.ID == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil || obj == nil {
			t.Fatalf("call %d is broken: %+v", i, c)
		}
	}
}

// checkStreaming parses text whole and in many chunkings (at every byte, into single
// bytes, at random) and requires the same result each time.
func checkStreaming(t testing.TB, f Family, text string, opts Options) Result {
	t.Helper()
	want := parseChunks(t, f, text, opts, nil)
	checkCalls(t, want)
	for i := 1; i < len(text); i++ {
		if got := parseChunks(t, f, text, opts, []int{i}); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: split at %d (%q | %q):\n got %+v\nwant %+v", f, i, text[:i], text[i:], got, want)
		}
	}
	bytes := make([]int, 0, len(text))
	for i := 1; i < len(text); i++ {
		bytes = append(bytes, i)
	}
	if got := parseChunks(t, f, text, opts, bytes); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: single bytes:\n got %+v\nwant %+v", f, got, want)
	}
	rng := rand.New(rand.NewPCG(uint64(len(text)), 7))
	for range 20 {
		var cuts []int
		for i := 1; i < len(text); i++ {
			if rng.IntN(4) == 0 {
				cuts = append(cuts, i)
			}
		}
		if got := parseChunks(t, f, text, opts, cuts); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: cuts %v:\n got %+v\nwant %+v", f, cuts, got, want)
		}
	}
	if got := Parse(f, text, withIDs(opts)); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: Parse differs from the parser:\n got %+v\nwant %+v", f, got, want)
	}
	return want
}

func withIDs(o Options) Options { o.NewID = counterIDs(); return o }

func renderResult(r Result) string {
	var b strings.Builder
	if r.Reasoning != "" {
		fmt.Fprintf(&b, "reasoning: %q\n", r.Reasoning)
	}
	if r.Content != "" {
		fmt.Fprintf(&b, "content: %q\n", r.Content)
	}
	for i, c := range r.Calls {
		fmt.Fprintf(&b, "call %d: %s %s %s\n", i, c.ID, c.Name, c.Arguments)
	}
	if b.Len() == 0 {
		return "(empty)\n"
	}
	return b.String()
}

// TestParse runs the golden generations in testdata/parse/*.txt:
//
//	tools name=NAME        input: a JSON array of {"name", "parameters"}; defines a tool set
//	parse family=F [tools=NAME] [reasoning] [starts-in-reasoning] [no-calls] [quoted]
//	                       input: the generated text (a Go string literal with quoted)
//	stream family=F [tools=NAME] [reasoning] [starts-in-reasoning] [no-calls]
//	                       input: one Go-quoted chunk per line, or "finish"; prints the
//	                       deltas each Feed (or Finish) returns
//	format family=F        input: a JSON array of {"name", "arguments"}; prints Format's
//	                       text and checks that Parse reads the calls back
//
// Every parse is also checked streamed at every split point, in single bytes and in random
// chunks, and must give the same result.
func TestParse(t *testing.T) {
	datadriven.Walk(t, "testdata/parse", func(t *testing.T, path string) {
		toolsets := map[string][]Tool{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "tools":
				var name string
				d.ScanArgs(t, "name", &name)
				var raw []struct {
					Name       string          `json:"name"`
					Parameters json.RawMessage `json:"parameters"`
				}
				if err := json.Unmarshal([]byte(d.Input), &raw); err != nil {
					d.Fatalf(t, "tools: %v", err)
				}
				var ts []Tool
				for _, r := range raw {
					ts = append(ts, Tool{Name: r.Name, Parameters: r.Parameters})
				}
				toolsets[name] = ts
				return ""
			case "parse":
				var fam string
				d.ScanArgs(t, "family", &fam)
				opts := Options{ParseReasoning: d.HasArg("reasoning"), StartsInReasoning: d.HasArg("starts-in-reasoning"), NoCalls: d.HasArg("no-calls")}
				if d.HasArg("tools") {
					var ts string
					d.ScanArgs(t, "tools", &ts)
					opts.Tools = toolsets[ts]
					if opts.Tools == nil {
						d.Fatalf(t, "no tool set %q", ts)
					}
				}
				text := d.Input
				if d.HasArg("quoted") {
					var err error
					if text, err = strconv.Unquote(strings.TrimSpace(d.Input)); err != nil {
						d.Fatalf(t, "quoted input: %v", err)
					}
				}
				return renderResult(checkStreaming(t, Family(fam), text, opts))
			case "stream":
				// input: one Go-quoted chunk per line; "finish" ends the generation.
				var fam string
				d.ScanArgs(t, "family", &fam)
				opts := Options{ParseReasoning: d.HasArg("reasoning"), StartsInReasoning: d.HasArg("starts-in-reasoning"), NoCalls: d.HasArg("no-calls"), NewID: counterIDs()}
				if d.HasArg("tools") {
					var ts string
					d.ScanArgs(t, "tools", &ts)
					opts.Tools = toolsets[ts]
				}
				p := NewParser(Family(fam), opts)
				var b strings.Builder
				for _, line := range strings.Split(d.Input, "\n") {
					var ds []Delta
					if line == "finish" {
						ds = p.Finish()
					} else {
						chunk, err := strconv.Unquote(line)
						if err != nil {
							d.Fatalf(t, "chunk %s: %v", line, err)
						}
						ds = p.Feed(chunk)
					}
					fmt.Fprintf(&b, "%s ->", line)
					if len(ds) == 0 {
						b.WriteString(" (held)")
					}
					for _, x := range ds {
						switch {
						case x.Content != "":
							fmt.Fprintf(&b, " content %q", x.Content)
						case x.Reasoning != "":
							fmt.Fprintf(&b, " reasoning %q", x.Reasoning)
						case x.Call.Name != "":
							fmt.Fprintf(&b, " call[%d] %s %s", x.Call.Index, x.Call.ID, x.Call.Name)
						default:
							fmt.Fprintf(&b, " args[%d] %s", x.Call.Index, x.Call.Arguments)
						}
					}
					b.WriteString("\n")
				}
				return b.String()
			case "format":
				var fam string
				d.ScanArgs(t, "family", &fam)
				var calls []Call
				var raw []struct {
					ID        string          `json:"id"`
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				}
				if err := json.Unmarshal([]byte(d.Input), &raw); err != nil {
					d.Fatalf(t, "format: %v", err)
				}
				for _, r := range raw {
					calls = append(calls, Call{ID: r.ID, Name: r.Name, Arguments: string(r.Arguments)})
				}
				f := Family(fam)
				text := Format(f, calls)
				var opts Options
				if d.HasArg("tools") {
					var ts string
					d.ScanArgs(t, "tools", &ts)
					opts.Tools = toolsets[ts]
				}
				back := checkStreaming(t, f, text, opts)
				if back.Content != "" || back.Reasoning != "" || len(back.Calls) != len(calls) {
					t.Fatalf("%s: Format's text does not parse back to the calls:\n%s\n%s", f, text, renderResult(back))
				}
				for i, c := range calls {
					want, _ := normArgs(c.Arguments)
					got := back.Calls[i]
					if got.Name != c.Name || got.Arguments != want || (c.ID != "" && got.ID != c.ID) {
						t.Fatalf("%s: call %d: formatted %+v, parsed back %+v", f, i, c, got)
					}
				}
				return fmt.Sprintf("%q\n", text)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// TestMarkersNotPrefixes: the scanner takes the first marker it sees complete, so no
// marker of a family may be a prefix of another (the longer one would lose to a chunk
// boundary).
func TestMarkersNotPrefixes(t *testing.T) {
	for f, syn := range syntaxes {
		checkNotPrefixes(t, f, syn)
	}
	for f, syn := range contentSyntaxes {
		checkNotPrefixes(t, f+" (no calls)", syn)
	}
}

func checkNotPrefixes(t *testing.T, f Family, syn *syntax) {
	t.Helper()
	for _, set := range [][]string{syn.texts, syn.reasoningEnds, append(append([]string(nil), syn.thinkOpen...), syn.thinkClose...)} {
		for i, a := range set {
			for j, b := range set {
				if i != j && strings.HasPrefix(b, a) {
					t.Errorf("%s: marker %q is a prefix of %q", f, a, b)
				}
			}
		}
	}
}
