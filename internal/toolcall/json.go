package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// scanJSON measures the JSON value at the start of s: complete with its length, needMore
// when s ends inside it, invalid when it is not JSON. The caller only passes objects,
// arrays and strings, which end on their own closing byte, so a complete answer holds for
// every continuation of s.
func scanJSON(s string) (int, status) {
	dec := json.NewDecoder(strings.NewReader(s))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, needMore
		}
		return 0, invalid
	}
	return int(dec.InputOffset()), complete
}

// normArgs turns a call's arguments into compact JSON text of an object. A JSON string
// that holds an object (some models quote their arguments) counts as that object.
func normArgs(raw string) (string, bool) {
	raw = strings.TrimSpace(raw)
	if strings.HasPrefix(raw, `"`) {
		var s string
		if json.Unmarshal([]byte(raw), &s) != nil {
			return "", false
		}
		raw = strings.TrimSpace(s)
		if raw == "" {
			raw = "{}"
		}
	}
	if !strings.HasPrefix(raw, "{") {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(raw)) != nil {
		return "", false
	}
	// Compact accepts any one value followed by whitespace; make sure it was one object.
	var obj map[string]json.RawMessage
	if json.Unmarshal(b.Bytes(), &obj) != nil {
		return "", false
	}
	return b.String(), true
}

// jsonCallKeys are the keys a JSON call object may have. Anything else means the JSON is
// not a call (Llama 3 writes calls as bare JSON, so a JSON answer must not pass for one).
var jsonCallKeys = map[string]bool{
	"name": true, "tool_name": true, "arguments": true, "parameters": true,
	"id": true, "type": true, "tool_call_id": true, "function": true,
}

// decodeJSONCall reads {"name": "f", "arguments": {…}} and its variants: "parameters"
// for "arguments" (Llama 3, Command R), "tool_name" for "name" (Command R), an OpenAI
// shaped {"type": "function", "function": {…}}, and an "id" (Mistral Nemo) kept as the id.
func decodeJSONCall(raw string, p *Parser) (rawCall, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &obj) != nil || obj == nil {
		return rawCall{}, false
	}
	for k := range obj {
		if !jsonCallKeys[k] {
			return rawCall{}, false
		}
	}
	if fn, ok := obj["function"]; ok {
		if _, has := obj["name"]; has {
			return rawCall{}, false
		}
		c, ok := decodeJSONCall(string(fn), p)
		if !ok {
			return rawCall{}, false
		}
		if id, ok := jsonStringField(obj, "id"); ok && id != "" {
			c.id = id
		}
		return c, true
	}
	name, ok := jsonStringField(obj, "name")
	if !ok {
		if name, ok = jsonStringField(obj, "tool_name"); !ok {
			return rawCall{}, false
		}
	}
	if !nameChars(name) || !p.known(name) {
		return rawCall{}, false
	}
	args := "{}"
	a, has := obj["arguments"]
	if !has {
		a, has = obj["parameters"]
	}
	if has && string(a) != "null" {
		if args, ok = normArgs(string(a)); !ok {
			return rawCall{}, false
		}
	}
	c := rawCall{name: name, args: args}
	if id, ok := jsonStringField(obj, "id"); ok && id != "" {
		c.id = id
	}
	return c, true
}

// decodeJSONCalls reads a non-empty JSON array of calls.
func decodeJSONCalls(raw string, p *Parser) ([]rawCall, bool) {
	var elems []json.RawMessage
	if json.Unmarshal([]byte(raw), &elems) != nil || len(elems) == 0 {
		return nil, false
	}
	calls := make([]rawCall, 0, len(elems))
	for _, e := range elems {
		c, ok := decodeJSONCall(string(e), p)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, true
}

func jsonStringField(obj map[string]json.RawMessage, key string) (string, bool) {
	v, ok := obj[key]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonString is s as a JSON string, without Go's HTML escapes.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// argsBuilder writes a JSON object key by key, in the model's order.
type argsBuilder struct {
	b strings.Builder
	n int
}

func (a *argsBuilder) add(key, jsonValue string) {
	if a.n == 0 {
		a.b.WriteByte('{')
	} else {
		a.b.WriteByte(',')
	}
	a.n++
	a.b.WriteString(jsonString(key))
	a.b.WriteByte(':')
	a.b.WriteString(jsonValue)
}

func (a *argsBuilder) done() string {
	if a.n == 0 {
		return "{}"
	}
	return a.b.String() + "}"
}

// xmlValue turns the raw text of an XML-style parameter into JSON by the parameter's
// schema type. The templates write one newline on each side of a value, which is not part
// of it. Strings (and values with no or an unknown type) stay text; a value that does not
// parse as its type stays text too, as vLLM and llama.cpp do.
func xmlValue(raw, typ string) string {
	v := strings.TrimPrefix(raw, "\n")
	v = strings.TrimSuffix(v, "\n")
	if j, ok := typedJSON(strings.TrimSpace(v), typ); ok {
		return j
	}
	return jsonString(v)
}

// k3Value turns the raw text of a Kimi K3 argument tag into JSON. The template writes the
// value's JSON type in the tag's type attribute and the value after it: a string raw (no
// newlines or quotes around it), anything else as JSON. The attribute is the model's own
// statement of which it wrote, so it is read first and "string" keeps the text exactly. A
// value that does not parse as its stated type (or a tag with no type the template writes)
// falls back to the tool's schema type, then to the text as a string.
func k3Value(raw, attrType, schemaType string) string {
	if attrType == "string" {
		return jsonString(raw)
	}
	t := strings.TrimSpace(raw)
	if j, ok := typedJSON(t, attrType); ok {
		return j
	}
	if j, ok := typedJSON(t, schemaType); ok {
		return j
	}
	return jsonString(raw)
}

// typedJSON is t as JSON of type typ (a JSON Schema type name), when it is written as one:
// a number, true or false (any case), null, or a JSON object or array. Strings and unknown
// types are never "written as" JSON: the caller keeps them as text.
func typedJSON(t, typ string) (string, bool) {
	switch typ {
	case "integer", "number":
		if isJSONNumber(t) {
			return t, true
		}
	case "boolean":
		switch strings.ToLower(t) {
		case "true":
			return "true", true
		case "false":
			return "false", true
		}
	case "null":
		if t == "null" {
			return "null", true
		}
	case "object", "array":
		if t != "" && (t[0] == '{') == (typ == "object") && (t[0] == '{' || t[0] == '[') {
			var b bytes.Buffer
			if json.Compact(&b, []byte(t)) == nil && json.Valid(b.Bytes()) {
				return b.String(), true
			}
		}
	}
	return "", false
}

func isJSONNumber(t string) bool {
	if t == "" || !(t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(t), &n) == nil
}

// paramType is the JSON Schema type of parameter key of tool name, or "" when the
// request gave no schema for it.
func (p *Parser) paramType(name, key string) string {
	t := p.tool[name]
	if t == nil || len(t.Parameters) == 0 {
		return ""
	}
	if p.types == nil {
		p.types = map[string]map[string]string{}
	}
	props, ok := p.types[name]
	if !ok {
		props = schemaTypes(t.Parameters)
		p.types[name] = props
	}
	return props[key]
}

// schemaTypes reads properties.*.type from a JSON Schema; for a list of types (["integer",
// "null"]) or an anyOf/oneOf it takes the first that is not "null".
func schemaTypes(schema json.RawMessage) map[string]string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	out := map[string]string{}
	if json.Unmarshal(schema, &s) != nil {
		return out
	}
	for k, v := range s.Properties {
		out[k] = propType(v)
	}
	return out
}

func propType(v json.RawMessage) string {
	var prop struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
	}
	if json.Unmarshal(v, &prop) != nil {
		return ""
	}
	var one string
	if json.Unmarshal(prop.Type, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(prop.Type, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	}
	for _, alt := range append(prop.AnyOf, prop.OneOf...) {
		if t := propType(alt); t != "" && t != "null" {
			return t
		}
	}
	return ""
}

// parseBuiltinCall reads Llama 3.1's builtin tool call NAME.call(key="value", n=1) and
// returns it with JSON arguments, and its length.
func parseBuiltinCall(s string, p *Parser) (rawCall, int, status) {
	i := 0
	ident := func() (string, status) {
		j := i
		for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || j > i && s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == len(s) {
			return "", needMore
		}
		if j == i {
			return "", invalid
		}
		id := s[i:j]
		i = j
		return id, complete
	}
	skipWS := func() { i = len(s) - len(strings.TrimLeft(s[i:], wsChars)) }
	expect := func(l string) status {
		c := cursor{s: s, i: i}
		st := c.lit(l)
		i = c.i
		return st
	}
	name, st := ident()
	if st != complete {
		return rawCall{}, 0, st
	}
	if st := expect(".call("); st != complete {
		return rawCall{}, 0, st
	}
	if !p.known(name) {
		return rawCall{}, 0, invalid
	}
	var args argsBuilder
	for first := true; ; first = false {
		skipWS()
		if i == len(s) {
			return rawCall{}, 0, needMore
		}
		if s[i] == ')' {
			i++
			break
		}
		if !first {
			if st := expect(","); st != complete {
				return rawCall{}, 0, st
			}
			skipWS()
		}
		key, st := ident()
		if st != complete {
			return rawCall{}, 0, st
		}
		skipWS()
		if st := expect("="); st != complete {
			return rawCall{}, 0, st
		}
		skipWS()
		val, n, st := pythonLiteral(s[i:])
		if st != complete {
			return rawCall{}, 0, st
		}
		i += n
		args.add(key, val)
	}
	return rawCall{name: name, args: args.done()}, i, complete
}

// pythonLiteral reads a Python string, number, True, False or None as JSON text. A
// number is only complete when a byte that cannot continue it follows.
func pythonLiteral(s string) (string, int, status) {
	if s == "" {
		return "", 0, needMore
	}
	switch q := s[0]; {
	case q == '"' || q == '\'':
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			switch ch := s[i]; ch {
			case q:
				return jsonString(b.String()), i + 1, complete
			case '\\':
				if i+1 == len(s) {
					return "", 0, needMore
				}
				i++
				switch e := s[i]; e {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case '\\', '\'', '"':
					b.WriteByte(e)
				default:
					b.WriteByte('\\')
					b.WriteByte(e)
				}
			case '\n':
				return "", 0, invalid
			default:
				b.WriteByte(ch)
			}
		}
		return "", 0, needMore
	case q == '-' || q >= '0' && q <= '9':
		j := 0
		for j < len(s) && strings.IndexByte("+-.eE0123456789", s[j]) >= 0 {
			j++
		}
		if j == len(s) {
			return "", 0, needMore
		}
		if !isJSONNumber(s[:j]) {
			return "", 0, invalid
		}
		return s[:j], j, complete
	}
	for _, w := range [...]struct{ py, js string }{{"True", "true"}, {"False", "false"}, {"None", "null"}} {
		c := cursor{s: s}
		switch c.lit(w.py) {
		case complete:
			return w.js, len(w.py), complete
		case needMore:
			return "", 0, needMore
		}
	}
	return "", 0, invalid
}
