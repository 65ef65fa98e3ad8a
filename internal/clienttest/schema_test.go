package clienttest

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// validate checks a decoded JSON value against the JSON Schema keywords that the clients'
// tool schemas use (type, enum, const, properties, required, additionalProperties, items,
// numeric bounds, string lengths and patterns, anyOf). It is the oracle for "the server's
// arguments are valid against the schema the client sent", independent of the server's own
// grammar code. Unknown keywords are ignored (they never make a value invalid here).
func validate(schema map[string]any, v any, path string) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	if len(schema) == 0 {
		return nil
	}
	if alts, ok := schema["anyOf"].([]any); ok && !slices.ContainsFunc(alts, func(a any) bool {
		sub, ok := a.(map[string]any)
		return ok && len(validate(sub, v, path)) == 0
	}) {
		fail("matches no anyOf alternative: %s", jsonText(v))
		return errs
	}
	if types := schemaTypes(schema["type"]); len(types) > 0 && !slices.ContainsFunc(types, func(ty string) bool { return hasType(v, ty) }) {
		fail("%s is not of type %v", jsonText(v), types)
		return errs
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return jsonText(e) == jsonText(v) }) {
		fail("%s is not one of %s", jsonText(v), jsonText(enum))
	}
	if c, ok := schema["const"]; ok && jsonText(c) != jsonText(v) {
		fail("%s is not the const %s", jsonText(v), jsonText(c))
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for _, r := range asSlice(schema["required"]) {
			if name, _ := r.(string); name != "" {
				if _, ok := x[name]; !ok {
					fail("missing required property %q", name)
				}
			}
		}
		for name, val := range x {
			if sub, ok := props[name].(map[string]any); ok {
				errs = append(errs, validate(sub, val, path+"."+name)...)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("property %q is not allowed", name)
				}
			case map[string]any:
				errs = append(errs, validate(ap, val, path+"."+name)...)
			}
		}
	case []any:
		if n, ok := number(schema["minItems"]); ok && float64(len(x)) < n {
			fail("%d items, minItems %v", len(x), n)
		}
		if n, ok := number(schema["maxItems"]); ok && float64(len(x)) > n {
			fail("%d items, maxItems %v", len(x), n)
		}
		if sub, ok := schema["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, validate(sub, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case string:
		n := float64(utf8.RuneCountInString(x))
		if m, ok := number(schema["minLength"]); ok && n < m {
			fail("%q shorter than minLength %v", x, m)
		}
		if m, ok := number(schema["maxLength"]); ok && n > m {
			fail("%q longer than maxLength %v", x, m)
		}
		if pat, ok := schema["pattern"].(string); ok {
			re, err := regexp.Compile(pat)
			if err != nil {
				fail("pattern %q does not compile here: %v", pat, err)
			} else if !re.MatchString(x) {
				fail("%q does not match pattern %q", x, pat)
			}
		}
	case float64:
		if m, ok := number(schema["minimum"]); ok && x < m {
			fail("%v below minimum %v", x, m)
		}
		if m, ok := number(schema["maximum"]); ok && x > m {
			fail("%v above maximum %v", x, m)
		}
		if m, ok := number(schema["exclusiveMinimum"]); ok && x <= m {
			fail("%v not above exclusiveMinimum %v", x, m)
		}
		if m, ok := number(schema["exclusiveMaximum"]); ok && x >= m {
			fail("%v not below exclusiveMaximum %v", x, m)
		}
	}
	return errs
}

func schemaTypes(t any) []string {
	switch x := t.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func hasType(v any, ty string) bool {
	switch ty {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	}
	return true
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestValidate checks the oracle itself on the keyword set the tool schemas use.
func TestValidate(t *testing.T) {
	schema := `{"type":"object","properties":{
		"city":{"type":"string","enum":["Paris","Oslo"]},
		"days":{"type":"integer","minimum":1,"maximum":7},
		"note":{"type":"string","maxLength":4,"pattern":"^[a-z]*$"},
		"tags":{"type":"array","items":{"type":"string"},"maxItems":2},
		"unit":{"anyOf":[{"type":"string","const":"C"},{"type":"null"}]}},
		"required":["city","days"],"additionalProperties":false}`
	var s map[string]any
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value string
		want  string // substring of the first error; "" for valid
	}{
		{`{"city":"Paris","days":3}`, ""},
		{`{"city":"Oslo","days":7,"note":"ab","tags":["x"],"unit":null}`, ""},
		{`{"city":"Oslo","days":1,"unit":"C"}`, ""},
		{`{"city":"Rome","days":3}`, "not one of"},
		{`{"city":"Paris"}`, `missing required property "days"`},
		{`{"city":"Paris","days":8}`, "above maximum"},
		{`{"city":"Paris","days":0}`, "below minimum"},
		{`{"city":"Paris","days":2.5}`, "not of type"},
		{`{"city":"Paris","days":2,"extra":1}`, `"extra" is not allowed`},
		{`{"city":"Paris","days":2,"note":"abcde"}`, "longer than maxLength"},
		{`{"city":"Paris","days":2,"note":"AB"}`, "does not match pattern"},
		{`{"city":"Paris","days":2,"tags":["a","b","c"]}`, "maxItems"},
		{`{"city":"Paris","days":2,"tags":[1]}`, "not of type"},
		{`{"city":"Paris","days":2,"unit":"F"}`, "anyOf"},
		{`["Paris"]`, "not of type"},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.value), &v); err != nil {
			t.Fatal(err)
		}
		errs := validate(s, v, "arguments")
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: want valid, have %v", tc.value, errs)
		case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0], tc.want)):
			t.Errorf("%s: want an error with %q, have %v", tc.value, tc.want, errs)
		}
	}
}
