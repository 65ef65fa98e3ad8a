package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"stockpot/internal/api"
)

// hopHeaders are connection-level headers a proxy must not forward.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

// generateBody is what the router reads of a completion or chat request.
type generateBody struct {
	Prompt    json.RawMessage `json:"prompt"`
	Messages  json.RawMessage `json:"messages"`
	CacheSalt string          `json:"cache_salt"`
	// PromptCacheKey is OpenAI's prompt_cache_key (cachekey.go).
	PromptCacheKey string `json:"prompt_cache_key"`
}

// readBody reads a request body of at most limit bytes within
// BodyReadTimeout: a client dripping its body is cut (408) rather than
// holding the connection. The deadline is the connection's read deadline,
// set for the body alone and cleared after it, so it never cuts the
// response (a long stream).
func (r *Router) readBody(w http.ResponseWriter, req *http.Request, limit int64) ([]byte, bool) {
	if req.ContentLength > limit {
		writeAPIError(w, api.TooLarge(limit))
		return nil, false
	}
	rc := http.NewResponseController(w)
	// ErrNotSupported (a test recorder): read without the deadline.
	deadline := rc.SetReadDeadline(time.Now().Add(r.cfg.BodyReadTimeout)) == nil
	body, err := readAllSized(http.MaxBytesReader(w, req.Body, limit), req.ContentLength)
	if deadline && err == nil {
		// After a failure the deadline stays: net/http's drain of the rest
		// of the body must not wait on the client either.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			writeAPIError(w, api.TooLarge(mbe.Limit))
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			writeAPIError(w, &api.Error{Status: http.StatusRequestTimeout, Type: api.TypeInvalidRequest, Code: "body_timeout",
				Message: fmt.Sprintf("the request body did not arrive within %v (--read-timeout)", r.cfg.BodyReadTimeout)})
		default:
			writeAPIError(w, api.Invalid("", "reading request body: %v", err))
		}
		return nil, false
	}
	return body, true
}

func (r *Router) serveGenerate(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	body, ok := r.readBody(w, req, r.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	rq := &Request{SessionID: req.Header.Get("X-Session-ID"), peers: r.backends(), remote: r.remote, Namespace: tenantOf(req).Salt("")}
	// Disaggregating, the router counts the prompt's tokens whatever the policy needs (the
	// short-tail rule, pd.go).
	pd := r.disaggregated()
	if r.needs != nil || pd {
		var gb generateBody
		// A malformed body is routed anyway; the backend answers the 400. A token-array
		// prompt is parsed as the body is scanned, into a pooled buffer.
		p := tokenPool.Get().(*[]int32)
		toks := decodeGenerateBodyTokens(body, &gb, (*p)[:0])
		rq.Salt, rq.CacheKey = routingSalt(req, gb.CacheSalt), gb.PromptCacheKey
		if pd || r.needs != nil && r.needs.NeedsTokens(rq) {
			switch {
			case renders(req.URL.Path):
				rq.Tokens = r.renderedTokens(req.Context(), req.URL.Path, body, &gb) // dialect.go
			case toks != nil:
				rq.Tokens, rq.pooledTokens, p = toks, p, nil
			default:
				rq.Tokens, rq.pooledTokens = r.promptTokens(req.Context(), &gb)
			}
		}
		if p != nil {
			if toks != nil {
				*p = toks[:0] // keep the buffer the parse may have grown
			}
			tokenPool.Put(p)
		}
	}
	switch {
	case pd && dialectOf(req.URL.Path) == dialectOpenAI:
		r.serveDisaggregated(w, req, body, start, rq)
	case pd: // Responses and Messages are not handed off: the decode pool takes them whole
		r.forwardPool(w, req, body, start, true, r.ordinaryPool(), func(c []*Backend) Decision { return r.policy.Pick(rq, c) })
	default:
		r.forward(w, req, body, start, true, func(c []*Backend) Decision { return r.policy.Pick(rq, c) })
	}
	rq.release() // every pick is done: forward picks only before each attempt
}

func (r *Router) servePassThrough(w http.ResponseWriter, req *http.Request) {
	var body []byte
	if req.Method == http.MethodPost {
		var ok bool
		if body, ok = r.readBody(w, req, r.cfg.MaxBodyBytes); !ok {
			return
		}
	}
	r.forwardPool(w, req, body, time.Now(), false, r.ordinaryPool(), func(c []*Backend) Decision {
		return Decision{Backend: pickLeastLoaded(c), Reason: "least-loaded"}
	})
}

// promptTokens returns the prompt's token ids: taken from the body when the
// prompt is a token array, else from a backend's /tokenize; nil on failure.
// pooled, when not nil, is the tokenPool buffer ids live in (Request.pooledTokens:
// handed back by Request.release).
func (r *Router) promptTokens(ctx context.Context, gb *generateBody) (ids []int32, pooled *[]int32) {
	var tb []byte
	switch {
	case len(gb.Prompt) > 0 && gb.Prompt[0] == '[':
		p := tokenPool.Get().(*[]int32)
		if ids, ok := parseTokenArrayInto((*p)[:0], gb.Prompt); ok {
			return ids, p
		}
		tokenPool.Put(p)
		if json.Unmarshal(gb.Prompt, &ids) == nil {
			return ids, nil
		}
		return nil, nil // a batch of prompts: no single prefix
	case len(gb.Prompt) > 0 && gb.Prompt[0] == '"':
		tb = append(append([]byte(`{"prompt":`), gb.Prompt...), '}')
	case len(gb.Messages) > 0 && gb.Messages[0] == '[':
		tb = append(append([]byte(`{"messages":`), gb.Messages...), '}')
	default:
		return nil, nil
	}
	return r.askTokens(ctx, "/tokenize", "", tb), nil
}

// askTokens returns the tokens a replica's endpoint (pathQuery: /tokenize, or renderPath with
// its endpoint) answers for body, from the token cache when it was asked before (keyed by
// pathQuery and body); nil on failure, counted in stockpot_router_tokenize_seconds.
func (r *Router) askTokens(ctx context.Context, pathQuery, cacheTag string, body []byte) []int32 {
	ids, _ := r.askTokensErr(ctx, pathQuery, cacheTag, body)
	return ids
}

// askTokensErr is askTokens that also says whether every backend asked answered 404 (a
// replica without the endpoint).
func (r *Router) askTokensErr(ctx context.Context, pathQuery, cacheTag string, body []byte) (ids []int32, notFound bool) {
	if ids, ok := r.toks.getTagged(cacheTag, body); ok {
		return ids, false
	}
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TokenizeTimeout)
	defer cancel()
	var tried []*Backend
	notFound = true
	for range 2 {
		c := r.serving(tried) // never an ejected backend, nor a half-open one's probe
		if len(c) == 0 {
			break
		}
		b := pickLeastLoaded(c)
		tried = append(tried, b)
		toks, err := r.tokenizeAt(ctx, b, pathQuery, body)
		notFound = notFound && errors.Is(err, errNotFound)
		var bf *backendFailure
		switch {
		case err == nil:
			r.passiveSuccess(b)
			r.m.tokenize.WithLabelValues("ok").Observe(since(start))
			r.toks.putTagged(cacheTag, body, toks)
			return toks, false
		case parent.Err() != nil:
			// The client left: no verdict on the backend.
		case errors.As(err, &bf) || !errors.Is(err, errClientStatus):
			r.passiveFailure(b, "tokenize: "+err.Error()) // 5xx, connection error, timeout, garbage
		default:
			r.passiveSuccess(b) // a 4xx: it answered
		}
		r.cfg.Logger.Debug("router: tokenize failed", "backend", b.ID, "err", err)
	}
	r.m.tokenize.WithLabelValues("error").Observe(since(start))
	return nil, notFound && len(tried) > 0
}

// tokenizeOn asks b's /tokenize for body's tokens.
func (r *Router) tokenizeOn(ctx context.Context, b *Backend, body []byte) ([]int32, error) {
	return r.tokenizeAt(ctx, b, "/tokenize", body)
}

// tokenizeAt asks b's pathQuery (/tokenize or renderPath) for body's tokens.
func (r *Router) tokenizeAt(ctx context.Context, b *Backend, pathQuery string, body []byte) ([]int32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL.String()+pathQuery, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.own.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return nil, &backendFailure{what: "tokenize: " + resp.Status}
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %w: tokenize: %s", errClientStatus, errNotFound, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: tokenize: %s", errClientStatus, resp.Status)
	}
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if ids, ok := scanTokens(rb); ok {
		return ids, nil
	}
	var out struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.NewDecoder(bytes.NewReader(rb)).Decode(&out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// backendFailure is an answer that counts against the backend's passive health (a 5xx).
type backendFailure struct{ what string }

func (e *backendFailure) Error() string { return e.what }

// errClientStatus marks a non-200 answer below 500: the backend answered (passive health
// counts it a success), the request was refused.
var errClientStatus = errors.New("refused")

// errNotFound marks a 404: a replica without the endpoint (renderPath predates it).
var errNotFound = errors.New("not found")

// failedResp is a 5xx answer kept in case every backend fails.
type failedResp struct {
	code   int
	header http.Header
	body   []byte
}

// forward sends the request to the backend pick chooses, retrying on
// another backend while nothing has reached the client: on a connection
// error, a 5xx status, or (for non-streamed answers, which are buffered
// whole) a body cut short.
func (r *Router) forward(w http.ResponseWriter, req *http.Request, body []byte, start time.Time, generate bool, pick func([]*Backend) Decision) {
	r.forwardPool(w, req, body, start, generate, nil, pick)
}

// forwardPool is forward over the candidates pool keeps of each attempt's (nil: all of them;
// the prefill/decode pools, pd.go).
func (r *Router) forwardPool(w http.ResponseWriter, req *http.Request, body []byte, start time.Time, generate bool, pool func([]*Backend) []*Backend, pick func([]*Backend) Decision) {
	ctx := req.Context()
	var tried []*Backend
	var last *failedResp
	var lastErr error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		cands := r.candidates(tried)
		if pool != nil {
			cands = pool(cands)
		}
		if len(cands) == 0 {
			break
		}
		d := pick(cands)
		b := d.Backend
		tried = append(tried, b)
		if !r.outliers.start(b.ID, time.Now()) {
			// A half-open backend whose one probe another request took meanwhile: pick
			// again without it (tried grows, so this ends), at no attempt's cost.
			attempt--
			continue
		}
		load := b.inflight.Add(1) - 1
		if attempt == 0 && generate && !start.IsZero() { // zero: recorded before an earlier hop (pd.go)
			r.observeOverhead(start)
		}
		done, fr, err := r.attempt(w, req, body, b, d, load, generate)
		b.inflight.Add(-1)
		if done {
			if err != nil {
				r.passiveFailure(b, err.Error()) // a stream the backend broke after it started
			} else {
				r.passiveSuccess(b) // an answer below 500, or a client that left mid-answer
			}
			return
		}
		if ctx.Err() != nil {
			r.outliers.abandon(b.ID)
			return // the client left; nobody to answer
		}
		b.errors.Add(1)
		if fr != nil {
			last = fr
			r.m.retries.WithLabelValues("5xx").Inc()
			msg := "HTTP " + strconv.Itoa(fr.code)
			b.lastErr.Store(&msg)
			r.passiveFailure(b, msg)
		} else {
			lastErr = err
			r.m.retries.WithLabelValues("connect").Inc()
			r.markDown(b, err.Error())
			r.passiveFailure(b, err.Error())
		}
	}
	r.m.failed.Inc()
	switch {
	case last != nil:
		copyHeader(w.Header(), last.header)
		w.WriteHeader(last.code)
		_, _ = w.Write(last.body)
	case lastErr != nil:
		writeAPIError(w, &api.Error{Status: http.StatusBadGateway, Type: api.TypeServer, Code: "bad_gateway",
			Message: "every backend failed; last error: " + lastErr.Error()})
	default:
		writeAPIError(w, api.Unavailable("%v", ErrNoBackend))
	}
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if hopHeaders[k] {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// attempt tries one backend. done: the client got an answer (success, a
// 4xx, or a stream that broke after it started: those cannot be retried;
// then err says how the backend broke it, for passive health).
// Otherwise fr holds a 5xx answer or err the transport error.
func (r *Router) attempt(w http.ResponseWriter, req *http.Request, body []byte, b *Backend, d Decision, load int64, generate bool) (done bool, fr *failedResp, err error) {
	u := b.URL.String() + req.URL.Path
	if req.URL.RawQuery != "" {
		u += "?" + req.URL.RawQuery
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	up, err := http.NewRequestWithContext(req.Context(), req.Method, u, rd)
	if err != nil {
		return false, nil, err
	}
	copyHeader(up.Header, req.Header)
	r.setUpstreamAuth(req, up, body)
	up.ContentLength = int64(len(body))
	resp, err := r.client.Do(up)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, &failedResp{code: resp.StatusCode, header: resp.Header.Clone(), body: rb}, nil
	}
	stream := bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream"))
	var usage usageInfo
	if !stream {
		rb, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil, fmt.Errorf("reading answer: %w", err)
		}
		r.decided(b, d, load, generate)
		copyHeader(w.Header(), resp.Header)
		w.Header().Set("X-Stockpot-Backend", b.ID)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(rb)
		if generate && resp.StatusCode == http.StatusOK {
			usage = parseUsageFor(dialectOf(req.URL.Path), rb)
		}
	} else {
		var ok bool
		if ok, usage, err = r.relayStream(w, req, resp, b, d, load, generate); !ok {
			return false, nil, err
		}
	}
	broke := err // relayStream: a stream the backend cut or left without [DONE]
	code := strconv.Itoa(resp.StatusCode)
	r.m.requests.WithLabelValues(b.ID, code).Inc()
	if usage.ok {
		r.m.prompt.WithLabelValues(b.ID).Add(float64(usage.prompt))
	}
	if usage.cachedKnown { // a missing cached count is unknown, never 0
		r.m.cached.WithLabelValues(b.ID).Add(float64(usage.cached))
		r.m.cacheHist.Observe(float64(usage.cached))
	}
	if generate {
		r.dash.record(b, d, resp.StatusCode, usage)
	}
	return true, nil, broke
}

// maxPendingEvent bounds how much of one SSE event the router holds back
// waiting for its end; past it the bytes go out as they are (a stream that
// is not SSE-shaped still flows).
const maxPendingEvent = 1 << 20

// relayStream copies an event stream to the client event by event: only
// complete events (up to a blank line) go out, so a backend that dies
// mid-event never leaves half an event at the client. ok=false means
// nothing reached the client (the stream failed before its first complete
// event) and the caller retries elsewhere; err says why. With ok, err is
// the break of a stream the backend cut or ended without [DONE]. A stream that
// breaks later cannot be resumed: the client gets an error event and
// [DONE], as serve sends when it fails mid-stream, and
// stockpot_router_stream_failures_total counts it.
func (r *Router) relayStream(w http.ResponseWriter, req *http.Request, resp *http.Response, b *Backend, d Decision, load int64, generate bool) (ok bool, usage usageInfo, err error) {
	buf := make([]byte, 32<<10)
	var pending []byte
	var rerr error
	read := func() {
		n, e := resp.Body.Read(buf)
		pending = append(pending, buf[:n]...)
		rerr = e
	}
	// The first complete event decides: before it a failure is retried.
	for rerr == nil && sseBoundary(pending) == 0 && len(pending) < maxPendingEvent {
		read()
	}
	if rerr != nil && sseBoundary(pending) == 0 && (rerr != io.EOF || len(pending) == 0) {
		if rerr == io.EOF {
			rerr = io.ErrUnexpectedEOF
		}
		return false, usage, fmt.Errorf("stream: %w", rerr)
	}
	r.decided(b, d, load, generate)
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("X-Stockpot-Backend", b.ID)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	// tail keeps the stream's last bytes: the usage chunk is the last data
	// line before [DONE].
	var tail []byte
	dl := dialectOf(req.URL.Path)
	us := usageScanner{d: dl} // Responses and Messages: their usage events as they pass
	clientGone := false
	for {
		k := sseBoundary(pending)
		if rerr == io.EOF || len(pending) >= maxPendingEvent {
			k = len(pending) // a clean end, or no event boundary in sight
		}
		if rerr != nil && rerr != io.EOF {
			k = min(k, sseBoundary(pending)) // never half an event after a cut
		}
		if k > 0 {
			if _, werr := w.Write(pending[:k]); werr != nil {
				clientGone = true
				break
			}
			_ = rc.Flush()
			tail = appendTail(tail, pending[:k], 16<<10)
			if generate && dl != dialectOpenAI {
				us.scan(pending[:k])
			}
			pending = append(pending[:0], pending[k:]...)
		}
		if rerr != nil {
			break
		}
		read()
	}
	if generate && resp.StatusCode == http.StatusOK {
		if usage = us.u; dl == dialectOpenAI {
			usage = parseStreamUsage(tail)
		}
	}
	if clientGone || req.Context().Err() != nil || resp.StatusCode != http.StatusOK {
		return true, usage, nil // nobody left to tell, or not a stream of ours
	}
	reason := ""
	switch {
	case rerr != io.EOF:
		reason = "cut"
	case generate && dl == dialectOpenAI && !endsWithDone(tail): // only OpenAI's streams end with [DONE]
		reason = "incomplete"
	}
	if reason != "" {
		r.streamFailed(w, rc, b, reason, rerr)
		return true, usage, fmt.Errorf("stream %s: %v", reason, rerr)
	}
	return true, usage, nil
}

// streamFailed ends a stream its backend broke: an error event in the
// OpenAI shape, then [DONE] (what serve's own sendError writes), so the
// client sees a clean end with a reason instead of a truncated stream.
func (r *Router) streamFailed(w http.ResponseWriter, rc *http.ResponseController, b *Backend, reason string, rerr error) {
	why := "it ended without [DONE]"
	if reason == "cut" {
		why = rerr.Error()
		r.markDown(b, "stream cut: "+why)
	}
	b.errors.Add(1)
	r.m.streamFailures.WithLabelValues(b.ID, reason).Inc()
	r.cfg.Logger.Warn("router: stream failed after its first byte", "backend", b.ID, "reason", reason, "err", why)
	e := &api.Error{Status: http.StatusBadGateway, Type: api.TypeServer, Code: "backend_stream_failed",
		Message: fmt.Sprintf("backend %s failed mid-stream (%s); a started stream cannot be resumed, retry the request", b.ID, why)}
	js, _ := json.Marshal(e.Body())
	out := make([]byte, 0, len(js)+32)
	out = append(append(append(out, "data: "...), js...), "\n\ndata: [DONE]\n\n"...)
	_, _ = w.Write(out)
	_ = rc.Flush()
}

// sseBoundary returns the end of the last complete event in p (just past
// the blank line that ends it, "\n\n" or "\n\r\n"); 0 when p holds none.
func sseBoundary(p []byte) int {
	end := 0
	if i := bytes.LastIndex(p, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	if i := bytes.LastIndex(p, []byte("\n\r\n")); i >= 0 && i+3 > end {
		end = i + 3
	}
	return end
}

// endsWithDone reports whether an OpenAI stream's last event is [DONE].
func endsWithDone(tail []byte) bool {
	t := bytes.TrimRight(tail, "\r\n")
	return bytes.HasSuffix(t, []byte("data: [DONE]")) || bytes.HasSuffix(t, []byte("data:[DONE]"))
}

// decided records the evidence of the decision that answered.
func (r *Router) decided(b *Backend, d Decision, load int64, generate bool) {
	b.requests.Add(1)
	if d.keyed() {
		r.keys.observe(d.CacheKey, d.Reason)
	}
	if !generate {
		return
	}
	r.m.decisions.WithLabelValues(r.policy.Name(), b.ID, d.Reason).Inc()
	r.m.load.Observe(float64(load))
	r.m.predicted.WithLabelValues(b.ID).Add(float64(d.PredictedTokens))
	r.m.predHist.Observe(float64(d.PredictedTokens))
}

func appendTail(tail, p []byte, max int) []byte {
	tail = append(tail, p...)
	if len(tail) > max {
		tail = append(tail[:0], tail[len(tail)-max:]...)
	}
	return tail
}

// parseStreamUsage finds the last SSE data line carrying usage.
func parseStreamUsage(tail []byte) usageInfo {
	for len(tail) > 0 {
		i := bytes.LastIndex(tail, []byte(`"usage"`))
		if i < 0 {
			return usageInfo{}
		}
		start := bytes.LastIndex(tail[:i], []byte("data:"))
		if start < 0 {
			return usageInfo{}
		}
		end := bytes.IndexByte(tail[i:], '\n')
		line := tail[start+len("data:"):]
		if end >= 0 {
			line = tail[start+len("data:") : i+end]
		}
		if u := parseUsage(bytes.TrimSpace(line)); u.ok {
			return u
		}
		tail = tail[:start]
	}
	return usageInfo{}
}

// parseTokenArray parses a JSON array of non-negative integers that fit in
// int32 ("[1, 2,3]"), the common token-id prompt, about 20× faster than
// encoding/json. ok=false for anything else; the caller falls back.
func parseTokenArray(b []byte) (ids []int32, ok bool) {
	return parseTokenArrayInto(nil, b)
}

// parseTokenArrayInto is parseTokenArray appending to dst[:0] (grown to len(b)/4 first, a
// guess that rarely needs a second growth: "1234," is 5 bytes); the result aliases dst when
// it fits.
func parseTokenArrayInto(dst []int32, b []byte) (ids []int32, ok bool) {
	ids, end, ok := parseTokenArrayAt(dst, b, skipWS(b, 0))
	return ids, ok && skipWS(b, end) == len(b)
}

// parseTokenArrayAt parses the token array starting at b[i] ('[') into dst[:0] and returns
// its end (just past the ']'); what follows is the caller's. It accepts what
// parseTokenArray accepts.
func parseTokenArrayAt(dst []int32, b []byte, i int) (ids []int32, end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	ids = dst[:0]
	if n := (len(b) - i) / 4; ids == nil || cap(ids) < n { // never nil: [] is a prompt
		ids = make([]int32, 0, n)
	}
	if i = skipWS(b, i+1); i < len(b) && b[i] == ']' {
		return ids, i + 1, true
	}
	for {
		// The common separator is a bare comma; skipWS handles the rest.
		start, v := i, uint64(0)
		for i < len(b) && b[i]-'0' <= 9 {
			v = v*10 + uint64(b[i]-'0')
			i++
		}
		// Ten digits can exceed int32 but not uint64; more is out of range anyway.
		if i == start || i-start > 10 || v > 1<<31-1 || b[start] == '0' && i-start > 1 {
			return nil, 0, false // no digits, out of range, or a leading zero (not JSON)
		}
		ids = append(ids, int32(v))
		if i < len(b) && b[i] == ',' {
			i++
			if i < len(b) && b[i]-'0' <= 9 {
				continue
			}
			i = skipWS(b, i)
			continue
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ']':
			return ids, i + 1, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return nil, 0, false
		}
	}
}

// readAllSized is io.ReadAll with the buffer sized from the Content-Length up front (one
// allocation for a 10 KB prompt instead of five doublings from 512 bytes).
func readAllSized(rd io.Reader, size int64) ([]byte, error) {
	if size <= 0 || size > 64<<20 {
		return io.ReadAll(rd)
	}
	buf := make([]byte, 0, size+1) // +1: EOF is seen without growing
	for {
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) { // a body longer than announced: grow as ReadAll would
			buf = append(buf, 0)[:len(buf)]
		}
	}
}
