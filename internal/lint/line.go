package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxLineBytes bounds one log line (a request body with its wrapper).
const MaxLineBytes = 32 << 20

// ErrBlank is returned by ParseLine for a line with nothing on it (skipped, not reported).
var ErrBlank = errors.New("lint: blank line")

// Line is one logged request.
type Line struct {
	// Body is the request body as the client sent it.
	Body []byte
	// Path is the endpoint it went to, when the log says ("/v1/chat/completions"); ""
	// means guess from the body.
	Path string
	// Session is the client's session id when the log has one (X-Session-ID).
	Session string
}

// ParseLine reads one JSONL log line: a request body object, or a wrapper
// {"body"|"request": {...}, "path"|"endpoint": "/v1/...", "session_id"|"session": "..."}
// as proxies log them. A body given as a JSON string holding the object is accepted too.
func ParseLine(raw []byte) (Line, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Line{}, ErrBlank
	}
	if len(raw) > MaxLineBytes {
		return Line{}, fmt.Errorf("line of %d bytes, over the limit of %d", len(raw), MaxLineBytes)
	}
	if raw[0] != '{' {
		return Line{}, fmt.Errorf("not a JSON object (starts with %q)", raw[:1])
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return Line{}, fmt.Errorf("not valid JSON: %v", err)
	}
	var l Line
	for _, k := range []string{"body", "request"} {
		b, ok := top[k]
		if !ok {
			continue
		}
		b = bytes.TrimSpace(b)
		if why := str(top, "skipped"); why != "" && string(b) == "null" {
			return Line{}, fmt.Errorf("the server did not keep this body: %s", why) // GET /v1/requests/recent
		}
		if len(b) > 0 && b[0] == '"' {
			var s string
			if err := json.Unmarshal(b, &s); err != nil {
				return Line{}, fmt.Errorf("%s: %v", k, err)
			}
			b = bytes.TrimSpace([]byte(s))
		}
		if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			return Line{}, fmt.Errorf("%s is not a JSON object", k)
		}
		l.Body = b
		l.Path = str(top, "path", "endpoint", "url")
		l.Session = str(top, "session_id", "session", "x_session_id")
		return l, nil
	}
	l.Body = raw
	return l, nil
}

// str returns the first of keys that holds a JSON string.
func str(top map[string]json.RawMessage, keys ...string) string {
	for _, k := range keys {
		var s string
		if v, ok := top[k]; ok && json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return ""
}
