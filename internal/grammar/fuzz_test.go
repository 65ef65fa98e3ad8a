package grammar

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var fuzzSchemaSeeds = []string{
	`{}`, `true`, `false`, `{"type":"integer","minimum":-3,"maximum":12}`,
	`{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"$ref":"#/$defs/b"}},"required":["a"],"$defs":{"b":{"type":["number","null"],"exclusiveMinimum":0.5}}}`,
	`{"type":"array","prefixItems":[{"const":1}],"items":{"enum":["x",{"y":[]}]},"maxItems":3}`,
	`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `{"type":"string","format":"date-time"}`,
	`{"type":"object","additionalProperties":{"type":"boolean"},"properties":{"ab":{}}}`,
	`{"type":"string","pattern":"a"}`, `{"allOf":[{"type":"boolean"}]}`, `{"$ref":"#/definitions/x","definitions":{"x":{"oneOf":[{"type":"integer"}]}}}`,
}

// FuzzJSONSchema: the schema compiler never panics, its errors are typed, and a grammar it
// builds has no dead ends: along a walk, while the output is not done some byte is allowed.
func FuzzJSONSchema(f *testing.F) {
	for _, s := range fuzzSchemaSeeds {
		f.Add([]byte(s), []byte{0, 1, 2, 3})
	}
	f.Fuzz(func(t *testing.T, schema, choices []byte) {
		n, err := JSONSchema(schema)
		if err != nil {
			var ue *UnsupportedError
			var se *SchemaError
			var be *BudgetError
			if !errors.As(err, &ue) && !errors.As(err, &se) && !errors.As(err, &be) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		g, err := Compile(n)
		if err != nil {
			t.Fatalf("JSONSchema succeeded but Compile failed: %v", err)
		}
		m := g.NewMatcher(bytesVocab)
		mask := make([]uint64, bytesVocab.MaskWords())
		var ids []int32
		for _, c := range choices {
			m.FillMask(mask)
			ids = allowedTokens(mask, ids)
			if len(ids) == 0 {
				t.Fatal("no token allowed")
			}
			tok := ids[int(c)%len(ids)]
			if err := m.Accept(tok); err != nil {
				t.Fatalf("mask allowed %d but Accept: %v", tok, err)
			}
			if m.Done() {
				return
			}
		}
	})
}

var fuzzVocab = func() *Vocab {
	toks := [][]byte{}
	for i := range 256 {
		toks = append(toks, []byte{byte(i)})
	}
	for _, s := range []string{`{"`, `":`, `","`, `"}`, `\u`, "é", "\xc3", `true`, `null`, `[{`, `}]`, `0.`, `12`, `-`, `": "`, "\n ", `"a`, `b"`} {
		toks = append(toks, []byte(s))
	}
	return NewVocab(append(toks, []byte("</s>")), nil, []int32{int32(len(toks))})
}()

const fuzzMatcherSchema = `{"type":"object","properties":{"a":{"type":"string","maxLength":4},"b":{"type":"array","items":{"type":"integer","minimum":-20,"maximum":300},"maxItems":3},"c":{"anyOf":[{"type":"boolean"},{"type":"number","minimum":0,"maximum":1.5}]}},"required":["a"],"additionalProperties":{"type":"null"}}`

// FuzzMatcher feeds arbitrary bytes to a schema's matcher. At every byte the mask must equal
// the brute-force mask (each token's bytes tried on a copy), the byte is accepted iff its
// one-byte token is in the mask, and whatever the matcher accepts as complete is JSON that
// an independent validator accepts.
func FuzzMatcher(f *testing.F) {
	for _, s := range []string{`{"a":"xy"}`, `{"a":"", "b": [1, -20, 300], "c": 1.25}`, `{"a":"é\n","zz":null}`, `{"a":"\u00e9"`, `{"b":[]}`, "{\"a\":\"\xc3\"}"} {
		f.Add([]byte(s))
	}
	n, err := JSONSchema([]byte(fuzzMatcherSchema))
	if err != nil {
		f.Fatal(err)
	}
	g, err := Compile(n)
	if err != nil {
		f.Fatal(err)
	}
	doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(fuzzMatcherSchema))
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		f.Fatal(err)
	}
	val, err := c.Compile("s.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m := g.NewMatcher(fuzzVocab)
		mask := make([]uint64, fuzzVocab.MaskWords())
		for i, b := range in {
			m.FillMask(mask)
			if want := bruteMask(fuzzVocab, m); !slicesEqual(mask, want) {
				t.Fatalf("at byte %d of %q: mask differs from brute force", i, in)
			}
			allowed := mask[b/64]>>(b%64)&1 == 1
			err := m.Accept(int32(b))
			if (err == nil) != allowed {
				t.Fatalf("at byte %d of %q: mask says %v, Accept says %v", i, in, allowed, err)
			}
			if err != nil {
				return
			}
		}
		if !m.Complete() {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted %q, which is not JSON", in)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(in)))
		if err != nil {
			t.Fatal(err)
		}
		if err := val.Validate(inst); err != nil {
			t.Fatalf("accepted %q, which the schema rejects: %v", in, err)
		}
	})
}
