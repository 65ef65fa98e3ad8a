package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/bytesize"
	"stockpot/internal/membudget"
)

// The request memory budget (--request-memory; package membudget says why). Every request with
// a body reserves, before a byte of it is read, what reading and parsing it may cost: its
// length (Content-Length; a chunked body reserves as it arrives, a 1 MiB grain ahead) times
// requestExpansion, plus requestBase. The reservation is held until its handler returns, so
// the sum over the requests in flight of what their bodies may cost stays within the budget,
// however many connections are open. A request that cannot get its share within --read-timeout
// is answered 503 with Retry-After, in its dialect's error shape, and nothing else is lost.

const (
	// requestExpansion is how many times its length a body may occupy while it is read and
	// planned: the raw bytes (read into one buffer of the declared length), the strings
	// json.Unmarshal copies out of them, the prompt rendered from the messages and its token
	// ids (at most 4 bytes a byte) are 4 copies; tokenizing adds 28 bytes a character of the
	// longest word it merges (internal/tokenizer's EncodeBytesPerByte comment), and a
	// character is at most a byte of the text, since readBody refuses a body that is not
	// UTF-8. A body of ordinary words costs far less; this is the bound for one word of
	// spaces as long as the body, on a model whose context would take it all.
	requestExpansion = 32
	// requestBase is what a request costs whatever its length: its structs, headers and the
	// small buffers of the handler.
	requestBase = 64 << 10
	// retryAfterSeconds is the Retry-After sent with a refusal: bodies of the requests in
	// flight are done with in about the time of a prefill.
	retryAfterSeconds = "1"
)

// requestCost is the reservation for a body of declared length n (-1: unknown), given the
// body limit. Pure.
func requestCost(n, maxBody int64) int64 {
	if n < 0 || n > maxBody {
		n = maxBody
	}
	return n*requestExpansion + requestBase
}

// reqmemMetrics are stockpot_request_memory_*.
type reqmemMetrics struct {
	refused prometheus.Counter
}

func newReqmemMetrics(reg prometheus.Registerer, b *membudget.Budget) (*reqmemMetrics, error) {
	m := &reqmemMetrics{refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stockpot_request_memory_refused_total",
		Help: "Requests answered 503 because the request memory budget (--request-memory) stayed full for --read-timeout.",
	})}
	for _, c := range []prometheus.Collector{m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stockpot_request_memory_bytes",
			Help: "Bytes of the request memory budget reserved by requests in flight (their bodies times the parse expansion).",
		}, func() float64 { return float64(b.InUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stockpot_request_memory_capacity_bytes",
			Help: "The request memory budget (--request-memory).",
		}, func() float64 { return float64(b.Capacity()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stockpot_request_memory_waiting",
			Help: "Requests waiting for the request memory budget.",
		}, func() float64 { return float64(b.Waiting()) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// reserveRequest reserves r's share of the request memory budget; release gives it back. A
// request without a body reserves nothing: the hostile soak's /health waited 5-24 s behind
// 4 MiB /tokenize bodies when a GET reserved the 64 KiB base in arrival order.
func (s *Server) reserveRequest(r *http.Request) (release func(), e *api.Error) {
	// ContentLength 0 is a request without a body (a GET, /health): it reserves nothing, and
	// so never queues behind the bodies waiting for the budget. r.Body cannot say so here: the
	// MaxBytesReader around it is never http.NoBody.
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody || s.reqmem == nil {
		return func() {}, nil
	}
	if r.ContentLength < 0 {
		// Sent chunked: its length is known only as it arrives, so it reserves as it does
		// (budgetBody), rather than the largest body's cost up front, which would let two
		// chunked requests of any size hold the default budget.
		bb := &budgetBody{ReadCloser: r.Body, s: s, ctx: r.Context()}
		if e := bb.grow(0); e != nil {
			return nil, e
		}
		r.Body = bb
		return bb.release, nil
	}
	n := requestCost(r.ContentLength, s.cfg.MaxBodyBytes)
	if e := s.acquireRequest(r.Context(), n); e != nil {
		return nil, e
	}
	return func() { s.reqmem.Release(n) }, nil
}

// acquireRequest reserves n bytes, waiting up to ReadTimeout; the error is the 503.
func (s *Server) acquireRequest(ctx context.Context, n int64) *api.Error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	if err := s.reqmem.Acquire(ctx, n); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			s.reqmemMetrics.refused.Inc()
		}
		// ErrTooLarge cannot happen: validate keeps the budget above the largest body's cost.
		return &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeUnavailable, Code: "overloaded",
			Message: fmt.Sprintf("the server's request memory (--request-memory %s) stayed held by other requests for %v; retry shortly",
				bytesize.Format(s.reqmem.Capacity()), s.cfg.ReadTimeout.Round(time.Millisecond))}
	}
	return nil
}

// chunkedGrain is how much more of a chunked body a budgetBody reserves for at a time: 1 MiB
// of body (32 MiB of budget), so a large body waits a few times, not once a read.
const chunkedGrain = 1 << 20

// budgetBody is a chunked body that reserves requestCost of what has arrived, a grain ahead,
// before handing it on. A read the budget cannot cover fails with the 503 (readBody passes an
// *api.Error through). Not safe for concurrent reads (nor is a request body).
type budgetBody struct {
	io.ReadCloser
	s        *Server
	ctx      context.Context
	read     int64 // bytes handed on
	reserved int64 // budget held
}

// grow reserves for read+n bytes of body, rounded up to the next grain.
func (b *budgetBody) grow(n int64) *api.Error {
	upto := min((b.read+n)/chunkedGrain*chunkedGrain+chunkedGrain, b.s.cfg.MaxBodyBytes)
	need := requestCost(upto, b.s.cfg.MaxBodyBytes)
	if need <= b.reserved {
		return nil
	}
	if e := b.s.acquireRequest(b.ctx, need-b.reserved); e != nil {
		return e
	}
	b.reserved = need
	return nil
}

func (b *budgetBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if e := b.grow(int64(n)); e != nil {
			return 0, e
		}
		b.read += int64(n)
	}
	return n, err
}

func (b *budgetBody) release() { b.s.reqmem.Release(b.reserved) }
