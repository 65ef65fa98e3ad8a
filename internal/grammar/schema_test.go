package grammar

import (
	"errors"
	"strings"
	"testing"
)

// Table tests: for each schema, strings the grammar must accept and strings it must reject,
// fed byte by byte (a one-byte-per-token vocabulary).
func TestSchemaFeatures(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		accept       []string
		reject       []string
	}{
		{"empty schema is any value", `{}`,
			[]string{`1`, `"a"`, `{"x":[1,{"y":null}]}`, `[]`, `true`, `-0.5e+3`},
			[]string{``, `tru`, `{,}`, ` 1`, `1 `}},
		{"true is any value", `true`, []string{`null`, `[1, 2]`}, []string{`nul`}},
		{"object required and optional in order", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]}`,
			[]string{`{"b":""}`, `{"a":1,"b":"x"}`, `{"b":"x","c":true}`, `{"a":-3,"b":"x","c":false}`, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"},
			[]string{`{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"b":"x","d":1}`, `{"b":"x",}`, `{"b":"x","b":"y"}`, `{ "b" : "x"}`}},
		{"no required: empty object allowed", `{"type":"object","properties":{"a":{"type":"null"}}}`,
			[]string{`{}`, `{ }`, `{"a":null}`}, []string{`{"a":null,}`, `{,}`}},
		{"additionalProperties schema", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}}`,
			[]string{`{}`, `{"a":1}`, `{"a":1,"b":true}`, `{"zz":false,"y":true}`, `{"aa":true}`, `{"":true}`},
			[]string{`{"b":1}`, `{"a":true}`, `{"a":1,"a":true}`}},
		{"additionalProperties true", `{"type":"object","additionalProperties":true}`,
			[]string{`{}`, `{"x":[1]}`, `{"x":1,"y":{"z":null}}`}, []string{`{"x"}`}},
		{"bare object is any object", `{"type":"object"}`, []string{`{}`, `{"x":[1]}`}, []string{`[]`}},
		{"additionalProperties false", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`,
			[]string{`{}`, `{"a":1}`}, []string{`{"b":1}`}},
		{"enum of any values", `{"enum":["red",2,null,{"k":[true]},[1,"x"]]}`,
			[]string{`"red"`, `2`, `null`, `{"k":[true]}`, `[1,"x"]`}, []string{`"blue"`, `3`, `{"k":[false]}`, `"re"`}},
		{"const", `{"const":"a\"b"}`, []string{`"a\"b"`}, []string{`"a"`, `"ab"`}},
		{"string lengths count characters", `{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"abc"`, `"é€"`, `"\n\u00e9x"`, `"😀😀"`, `"\\\""`},
			[]string{`"a"`, `"abcd"`, `"é"`, `"\ud83d\ude00"`, "\"a\nb\"", `"\x"`, "\"\xc3\""}},
		{"string escapes", `{"type":"string"}`,
			[]string{`""`, `"\"\\\/\b\f\n\r\t"`, `"\u0041\uFFFF"`, `"tab\tok"`},
			[]string{`"\a"`, `"\u12"`, `"\uD800"`, "\"\t\"", `"unterminated`}},
		{"array items and counts", `{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3}`,
			[]string{`[0]`, `[1, 2]`, `[1,2,3]`, "[\n  1,\n  2\n]"},
			[]string{`[]`, `[1,2,3,4]`, `[10]`, `[1,]`, `[-1]`}},
		{"array without items", `{"type":"array","maxItems":2}`, []string{`[]`, `[{"a":1},"x"]`}, []string{`[1,2,3]`}},
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`,
			[]string{`[]`, `["a"]`, `["a",1]`}, []string{`["a",1,2]`, `[1]`}},
		{"prefixItems then items", `{"type":"array","prefixItems":[{"const":0}],"items":{"type":"boolean"},"minItems":2}`,
			[]string{`[0,true]`, `[0,true,false]`}, []string{`[0]`, `[0,1]`}},
		{"integer range", `{"type":"integer","minimum":-15,"maximum":1234}`,
			[]string{`-15`, `-9`, `0`, `7`, `99`, `999`, `1000`, `1234`},
			[]string{`-16`, `-0`, `01`, `1235`, `9999`, `1.5`, `1e2`}},
		{"integer exclusive", `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100}`,
			[]string{`1`, `99`}, []string{`0`, `100`}},
		{"integer draft4 exclusive", `{"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":5}`,
			[]string{`1`, `5`}, []string{`0`, `6`}},
		{"integer fractional bounds", `{"type":"integer","minimum":0.5,"maximum":3.5}`,
			[]string{`1`, `3`}, []string{`0`, `4`}},
		{"integer unbounded has at most 15 digits", `{"type":"integer"}`,
			[]string{`0`, `-123`, `999999999999999`}, []string{`1234567890123456`, `1.0`}},
		{"number range", `{"type":"number","minimum":-1.5,"maximum":2.25}`,
			[]string{`-1.5`, `-1`, `-0.25`, `0`, `0.5`, `2`, `2.25`, `2.2499`, `1.000000`},
			[]string{`-1.51`, `-2`, `2.26`, `3`, `2.250001`, `1e0`}},
		{"number exclusive", `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`,
			[]string{`0.5`, `0.000001`, `0.999999`}, []string{`0`, `1`, `0.0`, `1.0`, `-0.5`}},
		{"number unbounded", `{"type":"number"}`,
			[]string{`0`, `-12.5`, `3.141592653589793`}, []string{`.5`, `1.`, `+1`, `1e5`}},
		{"boolean and null", `{"type":["boolean","null"]}`, []string{`true`, `false`, `null`}, []string{`0`, `"true"`}},
		{"nullable string", `{"type":["string","null"],"maxLength":1}`, []string{`"a"`, `null`}, []string{`"ab"`}},
		{"anyOf and oneOf", `{"anyOf":[{"type":"integer","minimum":0,"maximum":3},{"oneOf":[{"const":"x"},{"type":"boolean"}]}]}`,
			[]string{`2`, `"x"`, `true`}, []string{`4`, `"y"`, `null`}},
		{"allOf single", `{"allOf":[{"type":"integer","minimum":5,"maximum":5}],"description":"five"}`, []string{`5`}, []string{`4`}},
		{"defs and refs", `{"$defs":{"pos":{"type":"integer","minimum":1,"maximum":9}},"definitions":{"name":{"type":"string","maxLength":2}},"type":"object","properties":{"n":{"$ref":"#/$defs/pos"},"s":{"$ref":"#/definitions/name"}},"required":["n","s"]}`,
			[]string{`{"n":3,"s":"ab"}`}, []string{`{"n":0,"s":"ab"}`, `{"n":3,"s":"abc"}`}},
		{"recursive ref", `{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["v","next"]}`,
			[]string{`{"v":1,"next":null}`, `{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}`}, []string{`{"v":1,"next":{"v":2}}`}},
		{"format date", `{"type":"string","format":"date"}`, []string{`"2024-02-28"`, `"1999-12-31"`, `"2000-04-30"`}, []string{`"2024-02-30"`, `"2024-13-01"`, `"2024-04-31"`, `"24-01-01"`}},
		{"format uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567e89b12d3a456426614174000"`}},
		{"format date-time", `{"type":"string","format":"date-time"}`, []string{`"2024-01-02T03:04:05Z"`, `"2024-01-02T23:59:59.123+02:00"`}, []string{`"2024-01-02 03:04:05Z"`, `"2024-01-02T24:00:00Z"`}},
		{"property names with escapes", `{"type":"object","properties":{"a\"b":{"const":1},"é/~":{"const":2}},"required":["a\"b","é/~"]}`,
			[]string{`{"a\"b":1,"é/~":2}`}, []string{`{"a\"b":1}`}},
		{"pattern anchored", `{"type":"string","pattern":"^[A-Z][a-z]{1,3}-\\d+$"}`,
			[]string{`"Ab-1"`, `"Zyxw-007"`}, []string{`"ab-1"`, `"Abcde-1"`, `"Ab-"`, `"xAb-1"`, `"Ab-1x"`}},
		{"pattern unanchored", `{"type":"string","pattern":"ab|cd"}`,
			[]string{`"ab"`, `"xxcdyy"`, `"--ab"`}, []string{`""`, `"ac"`}},
		{"pattern escapes in JSON", `{"type":"string","pattern":"^\"\\\\\n.?$"}`,
			[]string{"\"\\\"\\\\\\n\"", "\"\\\"\\\\\\nx\""}, []string{"\"\\\"\\\\\"", "\"\\\"\\\\\\n\\n\""}},
		{"pattern case folding", `{"type":"string","pattern":"^(?i)ok$"}`, []string{`"ok"`, `"OK"`, `"oK"`}, []string{`"o"`}},
		{"annotations are ignored", `{"title":"T","description":"D","$schema":"https://json-schema.org/draft/2020-12/schema","default":1,"examples":[1],"x-vendor":{},"type":"integer","minimum":1,"maximum":1}`,
			[]string{`1`}, []string{`2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := JSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			g := mustCompile(t, n)
			for _, s := range tc.accept {
				if !matches(t, g, s) {
					t.Errorf("rejects %s", s)
				}
			}
			for _, s := range tc.reject {
				if matches(t, g, s) {
					t.Errorf("accepts %s", s)
				}
			}
		})
	}
}

func TestStrictIgnoresAdditionalProperties(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`
	n, err := JSONSchemaWith([]byte(schema), SchemaOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	g := mustCompile(t, n)
	if !matches(t, g, `{"a":1}`) || matches(t, g, `{"a":1,"b":2}`) {
		t.Error("strict mode must allow exactly the listed properties")
	}
}

func TestSchemaErrors(t *testing.T) {
	unsupported := []struct{ schema, feature, path string }{
		{`{"type":"string","pattern":"a\\bc"}`, "pattern operator \\b (anchors inside the pattern, \\b, multi-line)", ""},
		{`{"type":"object","properties":{"x":{"type":"string","pattern":"(?=a)"}}}`, "pattern \"(?=a)\" does not parse: error parsing regexp: invalid or unsupported Perl syntax: `(?=`", "/properties/x"},
		{`{"type":"string","pattern":"a","maxLength":3}`, "pattern with minLength/maxLength", ""},
		{`{"type":"string","pattern":"(a*)+"}`, "a pattern that repeats a group which can match the empty string", ""},
		{`{"type":"number","multipleOf":2}`, "multipleOf", ""},
		{`{"not":{}}`, "not", ""},
		{`{"type":"array","items":{"type":"integer"},"uniqueItems":true}`, "uniqueItems", ""},
		{`{"type":"string","format":"email"}`, `format "email"`, ""},
		{`{"allOf":[{"type":"integer"},{"minimum":1}]}`, "allOf with more than one schema", ""},
		{`{"$ref":"https://example.com/s.json"}`, "$ref to https://example.com/s.json (only local #/... references)", ""},
		{`{"type":"object","minProperties":1}`, "minProperties", ""},
		{`{"type":"object","patternProperties":{"a":{}}}`, "patternProperties", ""},
		{`{"if":{},"then":{}}`, "if", ""},
		{`{"items":[{"type":"integer"}]}`, "items as an array (use prefixItems)", ""},
		{`{"anyOf":[{"type":"integer"}],"type":"integer"}`, "anyOf with sibling keyword type", ""},
	}
	for _, tc := range unsupported {
		_, err := JSONSchema([]byte(tc.schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: have %v, want *UnsupportedError", tc.schema, err)
			continue
		}
		if ue.Feature != tc.feature || ue.Path != tc.path {
			t.Errorf("%s: have %q at %q, want %q at %q", tc.schema, ue.Feature, ue.Path, tc.feature, tc.path)
		}
		if !strings.Contains(err.Error(), tc.feature) || !strings.Contains(err.Error(), "#"+tc.path) {
			t.Errorf("%s: message %q must name %q and #%s", tc.schema, err, tc.feature, tc.path)
		}
	}
	malformed := []string{
		``, `{`, `[]`, `1`, `false`, `{"type":"strin"}`, `{"type":3}`, `{"type":[]}`,
		`{"type":"string","minLength":-1}`, `{"type":"string","minLength":3,"maxLength":2}`,
		`{"type":"string","maxLength":"5"}`, `{"type":"integer","minimum":5,"maximum":4}`,
		`{"type":"integer","minimum":"1"}`, `{"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1}`,
		`{"$ref":"#/$defs/missing"}`, `{"$ref":"#"}`, `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`,
		`{"enum":[]}`, `{"anyOf":[]}`, `{"type":"object","properties":[]}`, `{"type":"object","required":"a"}`,
		`{"type":"object","required":["a"],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":false},"required":["a"]}`, `{"a":1,"a":2}`, `{"type":"array","minItems":3,"maxItems":1}`,
		`{"type":"array","prefixItems":[{}],"items":false,"minItems":2}`,
	}
	for _, s := range malformed {
		_, err := JSONSchema([]byte(s))
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: have %v, want *SchemaError", s, err)
		}
	}
}

func TestBuildingBlocks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      Node
		accept []string
		reject []string
	}{
		{"literal", Literal("abc"), []string{"abc"}, []string{"ab", "abcd", ""}},
		{"seq alt optional", Seq(Literal("a"), Optional(Alt(Literal("b"), Literal("c"))), Literal("d")), []string{"ad", "abd", "acd"}, []string{"abcd", "a"}},
		{"repeat", Repeat(Literal("ab"), 1, 2), []string{"ab", "abab"}, []string{"", "ababab", "aba"}},
		{"repeat unbounded", Repeat(Literal("x"), 2, -1), []string{"xx", strings.Repeat("x", 100)}, []string{"x"}},
		{"chars except", CharsExcept("<>é", 1, 3), []string{"a", "a b", "€€€", "ü"}, []string{"", "abcd", "a<", "é", "\xff"}},
		{"text until", TextUntil("</x>", 5), []string{"</x>", "hello</x>", "<</x>", "</</x>", "é</x" + ">"}, []string{"hello!</x>", "a</x>b", "abc", "</x>" + "</x>"}},
		{"text until unbounded", TextUntil("\n\n", -1), []string{strings.Repeat("a\n", 50) + "\n"}, []string{"a\n\nb\n\n"}},
		{"json object", JSONObject(), []string{`{}`, `{"a":[1,{"b":"c"}]}`}, []string{`[]`, `1`}},
		{"json string", JSONString(1, 2), []string{`"a"`, `"\u00e9b"`}, []string{`""`, `"abc"`}},
		{"tool call envelope", Seq(Literal(`{"name":"get_weather","arguments":`), mustSchema(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"]}`), Literal("}")),
			[]string{`{"name":"get_weather","arguments":{"city":"Paris"}}`}, []string{`{"name":"get_weather","arguments":{}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := mustCompile(t, tc.n)
			for _, s := range tc.accept {
				if !matches(t, g, s) {
					t.Errorf("rejects %q", s)
				}
			}
			for _, s := range tc.reject {
				if matches(t, g, s) {
					t.Errorf("accepts %q", s)
				}
			}
		})
	}
}

func mustSchema(t testing.TB, s string) Node {
	t.Helper()
	n, err := JSONSchema([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCompileErrors(t *testing.T) {
	v := ref()
	v.bind(Alt(Seq(v, Literal("a")), Literal("b")))
	for name, n := range map[string]Node{
		"never":             Alt(),
		"zero node":         {},
		"nullable repeat":   Repeat(Optional(Literal("a")), 0, 3),
		"left recursion":    v,
		"bad repeat bounds": Repeat(Literal("a"), 3, 1),
		"empty stop":        TextUntil("", 3),
	} {
		if _, err := Compile(n); !errors.Is(err, ErrGrammar) {
			t.Errorf("%s: have %v, want ErrGrammar", name, err)
		}
	}
}

// TestDoneAndComplete: a number may go on (complete, not done); a closed object must end.
func TestDoneAndComplete(t *testing.T) {
	g := mustCompile(t, mustSchema(t, `{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99}},"required":["n"]}`))
	m := g.NewMatcher(bytesVocab)
	steps := []struct {
		in             string
		complete, done bool
	}{{`{"n":`, false, false}, {`4`, false, false}, {`2`, false, false}, {`}`, true, true}}
	for _, s := range steps {
		if err := m.AcceptBytes([]byte(s.in)); err != nil {
			t.Fatal(err)
		}
		if m.Complete() != s.complete || m.Done() != s.done {
			t.Errorf("after %q: complete %v done %v, want %v %v", s.in, m.Complete(), m.Done(), s.complete, s.done)
		}
	}
	mask := make([]uint64, bytesVocab.MaskWords())
	m.FillMask(mask)
	for i := range 257 {
		if got := mask[i/64]>>(i%64)&1 == 1; got != (i == 256) {
			t.Errorf("token %d allowed %v when done", i, got)
		}
	}
	if err := m.Accept('x'); !errors.Is(err, ErrRejected) {
		t.Errorf("accepted a byte after the end: %v", err)
	}
	if err := m.Accept(256); err != nil {
		t.Fatal(err)
	}
	n := g.NewMatcher(bytesVocab)
	if err := n.Accept(256); !errors.Is(err, ErrRejected) {
		t.Errorf("end token accepted at the start: %v", err)
	}
	num := mustCompile(t, mustSchema(t, `{"type":"integer","minimum":0,"maximum":99}`)).NewMatcher(bytesVocab)
	_ = num.AcceptBytes([]byte("4"))
	if !num.Complete() || num.Done() {
		t.Error("after 4 of 0..99: want complete and not done")
	}
}

func TestStrictBareObjectIsEmpty(t *testing.T) {
	n, err := JSONSchemaWith([]byte(`{"type":"object"}`), SchemaOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	g := mustCompile(t, n)
	if !matches(t, g, `{}`) || matches(t, g, `{"a":1}`) {
		t.Error(`strict {"type":"object"} must be exactly {}`)
	}
}
