package connlimit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"stockpot/internal/api"
)

// FuzzRewritePreHandlerError: whatever bytes a connection writes, the rewrite either leaves
// them alone or produces one well-formed HTTP response with the same status and an API error
// body; a handler's response (with its Date header) is never rewritten.
func FuzzRewritePreHandlerError(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 431 Request Header Fields Too Large" + preHandlerHeaders + "431 Request Header Fields Too Large",
		"HTTP/1.1 400 Bad Request" + preHandlerHeaders + "400 Bad Request",
		"HTTP/1.1 400 Bad Request: missing required Host header" + preHandlerHeaders + "400 Bad Request: missing required Host header",
		"HTTP/1.1 501 Not Implemented" + preHandlerHeaders + "Unsupported transfer encoding",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Tue, 01 Dec 2026 08:00:00 GMT\r\nContent-Length: 3\r\n\r\nbad",
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}",
		"data: {\"x\":1}\n\n",
		"HTTP/1.1 99",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, ok := rewritePreHandlerError(b, 1<<20)
		if !ok {
			return
		}
		if bytes.Contains(b, []byte("\r\nDate: ")) && !bytes.Contains(b, []byte(preHandlerHeaders)) {
			t.Fatalf("rewrote a handler's response %q", b)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("rewrite of %q is not an HTTP response: %v\n%q", b, err, out)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
			t.Fatalf("rewrite body %q: %v", body, err)
		}
		if resp.StatusCode < 400 || string(b[len("HTTP/1.1 "):len("HTTP/1.1 ")+3]) != resp.Status[:3] {
			t.Fatalf("status %q from %q", resp.Status, b)
		}
	})
}
