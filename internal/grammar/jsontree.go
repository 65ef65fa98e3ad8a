package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// jv is a parsed JSON value that keeps object key order (properties are emitted in schema
// order) and number text (bounds are compared exactly).
type jv struct {
	kind jkind
	str  string // string value, or number text
	b    bool
	arr  []*jv
	obj  []member
}

type member struct {
	key string
	val *jv
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// maxSchemaDepth bounds nesting in a schema document (the parser recurses).
const maxSchemaDepth = 200

func parseJSON(data []byte) (*jv, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := parseValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

func parseValue(d *json.Decoder, depth int) (*jv, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxSchemaDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch x := tok.(type) {
	case nil:
		return &jv{kind: jNull}, nil
	case bool:
		return &jv{kind: jBool, b: x}, nil
	case json.Number:
		return &jv{kind: jNumber, str: x.String()}, nil
	case string:
		return &jv{kind: jString, str: x}, nil
	case json.Delim:
		switch x {
		case '[':
			v := &jv{kind: jArray}
			for d.More() {
				e, err := parseValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, e)
			}
			_, err := d.Token()
			return v, err
		case '{':
			v := &jv{kind: jObject}
			seen := map[string]bool{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if seen[k] {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				seen[k] = true
				e, err := parseValue(d, depth+1)
				if err != nil {
					return nil, err
				}
				v.obj = append(v.obj, member{k, e})
			}
			_, err := d.Token()
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

func (v *jv) get(key string) (*jv, bool) {
	for _, m := range v.obj {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// appendCanonical appends v as compact JSON (strings escaped minimally, no HTML escaping).
func appendCanonical(dst []byte, v *jv) []byte {
	switch v.kind {
	case jNull:
		return append(dst, "null"...)
	case jBool:
		return strconv.AppendBool(dst, v.b)
	case jNumber:
		return append(dst, v.str...)
	case jString:
		return appendJSONString(dst, v.str)
	case jArray:
		dst = append(dst, '[')
		for i, e := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, e)
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	for i, m := range v.obj {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, m.key)
		dst = append(dst, ':')
		dst = appendCanonical(dst, m.val)
	}
	return append(dst, '}')
}

func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
