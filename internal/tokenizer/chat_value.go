package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The template sees the request's JSON as Python's json.loads would give it to
// transformers: objects are dicts in the order their keys were received (a
// template that writes `tools | tojson` must reproduce the client's bytes),
// integers stay integers and other numbers are floats.

// maxJSONDepth bounds the nesting of JSON turned into template values; the
// decoder recurses once per level.
const maxJSONDepth = 256

// ErrJSONValue is wrapped when JSON handed to the template (a tool, tool-call
// arguments, a kwarg) is not valid JSON.
var ErrJSONValue = errors.New("tokenizer: invalid JSON value for the chat template")

// jsonValue parses one JSON value into a template value, keeping object key
// order. Duplicate keys keep the first position and the last value, as
// Python's dict does.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("%w: %v", ErrJSONValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), fmt.Errorf("%w: trailing data", ErrJSONValue)
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t), nil
	case json.Delim:
		switch t {
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				k, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected token %v", tok)
}

// numberValue is Python's json.loads of a number: an integer when it has no
// fraction or exponent, else a float. Integers beyond int64 become floats
// (Python keeps them exact; no chat template depends on that).
func numberValue(n json.Number) jinja.Value {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return jinja.NewString(s)
	}
	return jinja.NewFloat(f)
}

// goValue turns a Go value into a template value: json.RawMessage is parsed
// (order kept), maps with string keys become dicts with sorted keys, slices
// lists, and the scalar kinds their own. Unsupported types are an error.
func goValue(x any) (jinja.Value, error) {
	switch v := x.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return v, nil
	case json.RawMessage:
		return jsonValue(v)
	case bool:
		return jinja.NewBool(v), nil
	case string:
		return jinja.NewString(v), nil
	case int:
		return jinja.NewInt(int64(v)), nil
	case int32:
		return jinja.NewInt(int64(v)), nil
	case int64:
		return jinja.NewInt(v), nil
	case float32:
		return jinja.NewFloat(float64(v)), nil
	case float64:
		return jinja.NewFloat(v), nil
	case json.Number:
		return numberValue(v), nil
	case []string:
		items := make([]jinja.Value, len(v))
		for i, s := range v {
			items[i] = jinja.NewString(s)
		}
		return jinja.NewList(items), nil
	case []any:
		items := make([]jinja.Value, len(v))
		for i, e := range v {
			ev, err := goValue(e)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = ev
		}
		return jinja.NewList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			ev, err := goValue(v[k])
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(k, ev)
		}
		return d, nil
	}
	return jinja.Undefined(), fmt.Errorf("%w: unsupported Go type %T", ErrJSONValue, x)
}

// pyJSON writes v as transformers' tojson filter does:
// json.dumps(v, ensure_ascii=ensureASCII, indent=indent, separators=(item, key),
// sort_keys=sortKeys). indent < 0 means None (one line).
type pyJSON struct {
	indent      int
	item, key   string
	ensureASCII bool
	sortKeys    bool
}

func (p pyJSON) encode(b *strings.Builder, v jinja.Value, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("tojson: nested deeper than %d", maxJSONDepth)
	}
	switch {
	case v.IsUndefined(), v.IsNone():
		// Python's Undefined is not serializable; HF templates only reach
		// this with None. Writing null is what the reference does too.
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatJSON(v.AsFloat()))
	case v.IsString():
		pyJSONString(b, v.AsString(), p.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(p.item)
			}
			p.newline(b, depth+1)
			if err := p.encode(b, it, depth+1); err != nil {
				return err
			}
		}
		p.newline(b, depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.Keys
		if p.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(p.item)
			}
			p.newline(b, depth+1)
			pyJSONString(b, k, p.ensureASCII)
			b.WriteString(p.key)
			if err := p.encode(b, d.Data[k], depth+1); err != nil {
				return err
			}
		}
		p.newline(b, depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot serialize a %s", typeName(v))
	}
	return nil
}

func (p pyJSON) newline(b *strings.Builder, depth int) {
	if p.indent < 0 {
		return
	}
	b.WriteByte('\n')
	for range depth * p.indent {
		b.WriteByte(' ')
	}
}

// pyFloatJSON is Python's float.__repr__ (json.dumps uses it): the shortest
// digits that round-trip, in positional form for decimal exponents -4..15
// (with ".0" for integral values), else d.ddde±XX. NaN and infinities are
// written as Python writes them (NaN, Infinity, -Infinity).
func pyFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// pyJSONString writes s as json.dumps does: \" \\ \n \r \t \b \f, other
// control characters as \u00xx, and with ensureASCII every non-ASCII
// character as \uxxxx (UTF-16 surrogate pairs above U+FFFF). Everything else,
// U+2028 and U+2029 included, is written as is.
func pyJSONString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hex[r>>4])
				b.WriteByte(hex[r&0xf])
			case ensureASCII && r > 0x7e: // Python escapes all but ' '..'~'
				writeU := func(u rune) {
					b.WriteString(`\u`)
					for sh := 12; sh >= 0; sh -= 4 {
						b.WriteByte(hex[(u>>sh)&0xf])
					}
				}
				if r > 0xffff {
					r -= 0x10000
					writeU(0xd800 + (r >> 10))
					writeU(0xdc00 + (r & 0x3ff))
				} else {
					writeU(r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func typeName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return "function"
}

// tojsonFilter is transformers' tojson: json.dumps with ensure_ascii=False,
// keys in insertion order, indent=None, default separators, unless the
// template passes indent, separators, ensure_ascii or sort_keys.
func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	p := pyJSON{indent: -1}
	// Positional: tojson(indent) as in Jinja's own filter.
	if len(args) > 1 && args[1].IsInt() {
		p.indent = int(args[1].AsInt())
	}
	if v, ok := kwargs["indent"]; ok && v.IsInt() {
		p.indent = int(v.AsInt())
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		p.ensureASCII = v.IsTruthy()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		p.sortKeys = v.IsTruthy()
	}
	p.item, p.key = ", ", ": "
	if p.indent >= 0 {
		p.item = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		p.item, p.key = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	var b strings.Builder
	if err := p.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}
