package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounded schemas used by the oracle tests: every value they allow has a bounded size, so a
// walk that picks allowed tokens at random must end.
var boundedSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"score":{"type":"number","minimum":-10.5,"maximum":99.25},"active":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},"required":["name","age"],"additionalProperties":false}`,
	`{"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer","minimum":-1000,"maximum":1000},"y":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":7}},"required":["x","y"]}},"type":"object","properties":{"kind":{"enum":["line","poly",3,null,{"a":[1]}]},"points":{"type":"array","items":{"$ref":"#/$defs/point"},"minItems":1,"maxItems":3},"label":{"type":["string","null"],"maxLength":4}},"required":["kind","points","label"]}`,
	`{"anyOf":[{"type":"string","format":"date"},{"type":"string","format":"uuid"},{"type":"integer","minimum":5,"maximum":5},{"const":{"ok":true}}]}`,
	`{"type":"array","prefixItems":[{"type":"boolean"},{"type":"number","exclusiveMinimum":0,"maximum":1}],"items":{"type":"null"},"minItems":2,"maxItems":4}`,
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z][a-z]{1,3}-\\d{1,4}(\\.[a-f0-9]{2})?$"},"q":{"type":"string","pattern":"^(?i)(yes|no|\\\"maybe\\\")$"},"t":{"type":"string","pattern":"^.{0,3}\\n?$"}},"required":["code","q","t"]}`,
	`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"note":{"type":"string","maxLength":3},"deep":{"type":"object","properties":{"deeper":{"type":"object","properties":{"v":{"type":"number","minimum":0,"maximum":1e3}}}}}}}`,
}

func compileValidator(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bruteMask is the oracle for FillMask: each token's bytes stepped one by one from the
// matcher's state (no trie, no memo).
func bruteMask(v *Vocab, m *Matcher) []uint64 {
	mask := make([]uint64, v.MaskWords())
	complete := m.Complete()
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range v.n {
		ok := false
		if v.isEOS[i] {
			ok = complete
		} else if v.ok[i] && !m.ended {
			s := m.state
			for _, b := range v.tokens[i] {
				if s = t.step(s, b); s == deadState {
					break
				}
			}
			ok = s != deadState
		}
		if ok {
			mask[i/64] |= 1 << (i % 64)
		}
	}
	return mask
}

func allowedTokens(mask []uint64, dst []int32) []int32 {
	dst = dst[:0]
	for w, x := range mask {
		for x != 0 {
			b := bits.TrailingZeros64(x)
			dst = append(dst, int32(w*64+b))
			x &= x - 1
		}
	}
	return dst
}

// walk generates with uniformly random allowed tokens until an end token; it returns the
// text and the number of tokens. checkEvery > 0 compares FillMask with bruteMask every
// checkEvery steps.
func walk(t *testing.T, g *Grammar, v *Vocab, rnd *rand.Rand, maxTokens, checkEvery int) (string, int, bool) {
	t.Helper()
	m := g.NewMatcher(v)
	mask := make([]uint64, v.MaskWords())
	var out bytes.Buffer
	var ids []int32
	for step := 0; step < maxTokens; step++ {
		m.FillMask(mask)
		if checkEvery > 0 && step%checkEvery == 0 {
			if want := bruteMask(v, m); !slicesEqual(mask, want) {
				t.Fatalf("step %d after %q: FillMask differs from brute force (%d vs %d tokens)", step, out.String(), len(allowedTokens(mask, nil)), len(allowedTokens(want, nil)))
			}
		}
		ids = allowedTokens(mask, ids)
		if len(ids) == 0 {
			t.Fatalf("no token allowed after %q", out.String())
		}
		tok := ids[rnd.IntN(len(ids))]
		if err := m.Accept(tok); err != nil {
			t.Fatalf("after %q: %v", out.String(), err)
		}
		if v.isEOS[tok] {
			return out.String(), step + 1, true
		}
		out.Write(v.tokens[tok])
	}
	return out.String(), maxTokens, false
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRandomWalksValidate: random generations over the real Qwen2 vocabulary parse as JSON,
// validate against the schema (checked by an independent validator), and end within a bound;
// along the way FillMask equals the brute-force mask.
func TestRandomWalksValidate(t *testing.T) {
	v, _ := qwen2Vocab(t)
	walks := 12
	if testing.Short() {
		walks = 3
	}
	for si, schema := range boundedSchemas {
		t.Run(fmt.Sprint(si), func(t *testing.T) {
			val := compileValidator(t, schema)
			g := mustCompile(t, mustSchema(t, schema))
			rnd := rand.New(rand.NewPCG(uint64(si), 7))
			longest := 0
			for w := range walks {
				check := 0
				if w < 4 {
					check = 1
				}
				text, n, ended := walk(t, g, v, rnd, 3000, check)
				if !ended {
					t.Fatalf("walk %d did not end in 3000 tokens: %q", w, text)
				}
				longest = max(longest, n)
				if w == 0 {
					t.Logf("%d tokens: %s", n, text)
				}
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				if err != nil {
					t.Fatalf("walk %d: not JSON: %v\n%s", w, err, text)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("walk %d: invalid: %v\n%s", w, err, text)
				}
				if !json.Valid([]byte(text)) {
					t.Fatalf("walk %d: encoding/json rejects %q", w, text)
				}
			}
			t.Logf("longest walk %d tokens", longest)
		})
	}
}

// TestMaskMatchesBruteForceCharVocab drives random byte walks (a vocabulary of single bytes
// and some multi-byte tokens) over unbounded grammars and compares masks at every step.
func TestMaskMatchesBruteForceCharVocab(t *testing.T) {
	toks := [][]byte{}
	for i := range 256 {
		toks = append(toks, []byte{byte(i)})
	}
	for _, s := range []string{`{"`, `":`, `", "`, `"}`, `\u00`, "é", "\xc3", "\xa9\"", `true`, `null,`, `[{`, `}]`, `0.`, `12`, `-1`, ` "`, "\n  ", `</x>`, `</`} {
		toks = append(toks, []byte(s))
	}
	toks = append(toks, []byte("<eos>"))
	v := NewVocab(toks, nil, []int32{int32(len(toks) - 1)})
	grammars := []Node{
		JSONValue(), JSONObject(),
		mustSchema(t, `{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"additionalProperties":{"type":"integer"}}`),
		mustSchema(t, boundedSchemas[0]),
		Seq(CharsExcept("<", 0, 4), TextUntil("</x>", 6)),
	}
	for gi, n := range grammars {
		g := mustCompile(t, n)
		rnd := rand.New(rand.NewPCG(uint64(gi), 1))
		for range 20 {
			walk(t, g, v, rnd, 60, 1)
		}
	}
}

// TestMaskMatchesBruteForceQwen2: free-text grammars over the real vocabulary, where the
// scan skips whole subtrees (plain text, whole characters), compared with the brute-force
// mask at every step; some exclude non-ASCII characters so that skipping must not happen.
func TestMaskMatchesBruteForceQwen2(t *testing.T) {
	v, _ := qwen2Vocab(t)
	for gi, n := range []Node{
		JSONString(0, -1),
		JSONString(3, 40),
		Seq(CharsExcept("é世\"", 0, 30), Literal(`"`)),
		Seq(CharsExcept("\n", 0, -1), Literal("\n")),
		TextUntil("</tool>", 40),
		TextUntil("\n\n", -1),
		mustSchema(t, `{"type":"array","items":{"type":"string","minLength":2,"maxLength":5},"minItems":1,"maxItems":200}`),
	} {
		g := mustCompile(t, n)
		rnd := rand.New(rand.NewPCG(uint64(gi), 3))
		for range 3 {
			walk(t, g, v, rnd, 25, 1)
		}
	}
}
