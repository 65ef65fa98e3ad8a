package lint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"stockpot/internal/miss"
)

// A Fixer rewrites a request body the way a client fixing one cause would.
type Fixer struct {
	Name  string     // "timestamps", "ids", "order", "whitespace", "salt"
	Cause miss.Cause // what it fixes
	Help  string     // what the client should do
	Apply func(body []byte) ([]byte, error)
}

// Fixers are the fixes lint estimates, one per cause it can undo from the log (a template
// change needs the server's or the client's template, not the requests).
var Fixers = []Fixer{
	{"timestamps", miss.Timestamp, "keep dates and times out of the prompt's prefix (put them in the last message, or round them to the day)",
		func(b []byte) ([]byte, error) { return mapStrings(b, miss.ReplaceTimestamps) }},
	{"ids", miss.UUID, "keep request ids and nonces out of the prompt (send them as metadata)",
		func(b []byte) ([]byte, error) { return mapStrings(b, miss.ReplaceIDs) }},
	{"order", miss.Reordered, "send tools in a fixed order (sorted by name) and serialise JSON with sorted keys",
		canonicalOrder},
	{"whitespace", miss.Whitespace, "normalise whitespace before sending (trim, one space for every run)",
		func(b []byte) ([]byte, error) { return mapStrings(b, miss.NormalizeWhitespace) }},
	{"salt", miss.Salt, "share one cache_salt between the requests that may share a prefix",
		dropSalt},
}

// marshal is json.Marshal without HTML escaping (the texts stay as the client wrote them).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// mapStrings rewrites every string value of body (not the keys) with f, keeping the order of
// keys and elements.
func mapStrings(body []byte, f func(string) string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		obj, wantKey bool
		n            int
	}
	var (
		out   bytes.Buffer
		stack []frame
	)
	sep := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		switch {
		case top.obj && !top.wantKey:
			out.WriteByte(':')
		case top.n > 0:
			out.WriteByte(',')
		}
	}
	done := func() { // a key or a value was written in the top container
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		if top.obj && top.wantKey {
			top.wantKey = false
			return
		}
		top.wantKey = top.obj
		top.n++
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 || out.Len() == 0 {
				return nil, io.ErrUnexpectedEOF
			}
			break
		}
		if err != nil {
			return nil, err
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				sep()
				out.WriteByte(byte(v))
				stack = append(stack, frame{obj: v == '{', wantKey: v == '{'})
			default:
				out.WriteByte(byte(v))
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			sep()
			if len(stack) == 0 || !stack[len(stack)-1].obj || !stack[len(stack)-1].wantKey {
				v = f(v)
			}
			b, err := marshal(v)
			if err != nil {
				return nil, err
			}
			out.Write(b)
			done()
		default:
			sep()
			b, err := marshal(v)
			if err != nil {
				return nil, err
			}
			out.Write(b)
			done()
		}
	}
	return out.Bytes(), nil
}

// canonicalOrder sorts the tools by name and every object's keys, including the JSON inside
// tool-call arguments and in contents that are whole JSON documents.
func canonicalOrder(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if tools, ok := v["tools"].([]any); ok {
		slices.SortStableFunc(tools, func(a, b any) int { return strings.Compare(toolName(a), toolName(b)) })
	}
	return marshal(canonicalStrings(v))
}

func toolName(t any) string {
	m, _ := t.(map[string]any)
	if f, ok := m["function"].(map[string]any); ok {
		if n, ok := f["name"].(string); ok {
			return n
		}
	}
	n, _ := m["name"].(string)
	return n
}

// canonicalStrings re-serialises strings that hold a JSON object or array with sorted keys
// (maps marshal sorted anyway).
func canonicalStrings(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalStrings(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalStrings(e)
		}
	case string:
		t := strings.TrimSpace(x)
		if len(t) < 2 || (t[0] != '{' && t[0] != '[') {
			return x
		}
		dec := json.NewDecoder(strings.NewReader(t))
		dec.UseNumber()
		var inner any
		if dec.Decode(&inner) != nil || dec.More() {
			return x
		}
		b, err := marshal(inner)
		if err != nil {
			return x
		}
		return string(b)
	}
	return v
}

// dropSalt removes cache_salt: every request under one root.
func dropSalt(body []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	if _, ok := top["cache_salt"]; !ok {
		return body, nil
	}
	delete(top, "cache_salt")
	b, err := marshal(top)
	if err != nil {
		return nil, fmt.Errorf("salt: %w", err)
	}
	return b, nil
}
