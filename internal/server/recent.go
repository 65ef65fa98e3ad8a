package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"stockpot/internal/api"
)

// GET /v1/requests/recent: the bodies of the last generation requests (chat completions,
// completions, Responses, Messages) as JSONL, one {"path","session_id","at","body"} per line,
// oldest first, the wrapper `stockpot lint` reads. So `stockpot lint --target URL` can lint
// what a running server is actually sent, with no log collected elsewhere.
//
// Bodies are what clients send, prompts of every tenant, so the route takes the admin key
// alone (403 without --admin-key, 401 for a missing or wrong one), and without an admin key
// nothing is recorded at all. Only requests that passed parsing and planning are recorded (a
// 4xx is not a prompt the cache saw). The ring is bounded in entries and in body bytes; a body
// over maxRecentBody is recorded without its body, as skipped.

// recentRequestsPath is the route of the recent requests.
const recentRequestsPath = "/v1/requests/recent"

// Bounds of the ring: the oldest entries go first when either is passed.
const (
	maxRecentRequests = 256
	maxRecentBytes    = 8 << 20
	maxRecentBody     = 1 << 20
)

// RecentRequest is one line of GET /v1/requests/recent.
type RecentRequest struct {
	Path      string          `json:"path"`
	SessionID string          `json:"session_id,omitempty"` // the X-Session-ID header
	At        time.Time       `json:"at"`
	Body      json.RawMessage `json:"body"` // null when skipped
	// Skipped says why the body was not kept (over maxRecentBody); lint reports the line.
	Skipped string `json:"skipped,omitempty"`
}

// recentRing holds the recent requests; the zero value is an empty ring.
type recentRing struct {
	mu    sync.Mutex
	buf   []RecentRequest // protected by mu; oldest first
	bytes int             // protected by mu; sum of len(Body) over buf
}

// add records a request whose body parsed and was accepted.
func (rr *recentRing) add(e RecentRequest) {
	if len(e.Body) > maxRecentBody {
		e.Skipped = fmt.Sprintf("body of %d bytes, over the %d bytes a recent request keeps", len(e.Body), maxRecentBody)
		e.Body = nil
	} else {
		// The body must stay valid JSON on its line: a parsed body is, and compacting it keeps
		// every string (so every prompt) as it was.
		var b bytes.Buffer
		if json.Compact(&b, e.Body) != nil {
			return
		}
		e.Body = b.Bytes()
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	drop := 0
	for len(rr.buf)-drop >= maxRecentRequests || (drop < len(rr.buf) && rr.bytes+len(e.Body) > maxRecentBytes) {
		rr.bytes -= len(rr.buf[drop].Body)
		rr.buf[drop] = RecentRequest{}
		drop++
	}
	rr.buf = append(rr.buf[drop:], e)
	rr.bytes += len(e.Body)
}

// last returns the newest n entries (all for n <= 0), oldest first.
func (rr *recentRing) last(n int) []RecentRequest {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	from := 0
	if n > 0 && n < len(rr.buf) {
		from = len(rr.buf) - n
	}
	return append([]RecentRequest(nil), rr.buf[from:]...)
}

// recordRequest is the hook of the generation handlers, called once a request is accepted.
func (s *Server) recordRequest(r *http.Request, body []byte) {
	if s.adminKeys.Len() == 0 {
		return // nobody could read it
	}
	s.recent.add(RecentRequest{Path: r.URL.Path, SessionID: r.Header.Get("X-Session-ID"), At: s.cfg.Now(), Body: body})
}

// handleRecentRequests serves GET /v1/requests/recent?limit=N (default all, at most
// maxRecentRequests).
func (s *Server) handleRecentRequests(w http.ResponseWriter, r *http.Request) {
	if !s.adminAllowed(w, r) {
		return
	}
	limit := 0
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxRecentRequests {
			writeError(w, api.Invalid("limit", "limit must be a whole number from 1 to %d, got %s", maxRecentRequests, api.Quote(v)))
			return
		}
		limit = n
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	for _, e := range s.recent.last(limit) {
		if err := enc.Encode(e); err != nil {
			writeError(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}
