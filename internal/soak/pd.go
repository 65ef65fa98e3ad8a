package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Prefill/decode runs (Config.PD). The fleet's first replicas are prefill replicas
// (serve --role prefill), each behind a TransferProxy; the rest are decode replicas (serve
// --role decode) whose --prefill-peer are those proxies. A handed-off op (Op.Handoff) is
// sent as vLLM's proxy sends it: the prefill request (kv_transfer_params do_remote_decode,
// stream false, max_tokens 1) to the prefill through its proxy, so the transfer it answers
// with names the proxy, then the op's own request with those kv_transfer_params to the
// decode, which pulls the blocks through the same proxy. The answer is judged against the
// oracle as every other answer is.
//
// The handoff faults happen at a moment of one handed-off request, so they are not the fault
// goroutine's: when the schedule reaches one, drive arms it (fleet.arm) and the next
// handed-off request carries it out, between its two steps or through the proxy during its
// pull, and records it:
//   - PrefillKill9: kill -9 the prefill replica once it answered, decode, restart it.
//   - DecodeKillPull: when the decode's pull reaches the proxy, kill -9 the decode (the pull
//     is answered 502 to a dead replica) and restart it; the client retries the decode
//     request as it retries any killed replica's.
//   - LeaseExpire: wait until the prefill no longer holds the transfer (its lease expired:
//     GET /v1/kv/transfer/{id} is a 404), then decode.
//   - CorruptTransfer: flip one byte of the pull's stream at the proxy.
// In each the decode must still answer as the oracle does: what it could not pull (or what
// did not verify) comes from the shared tiers or is computed. A kill and restart holds
// fleet.procs, as the fault goroutine's kills do, so two never act on one replica at once.

// arm queues a handoff fault for the next handed-off request.
func (f *fleet) arm(ft Fault) {
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	f.pending = append(f.pending, ft)
}

// takeHook returns the oldest armed handoff fault, if any.
func (f *fleet) takeHook() (Fault, bool) {
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	if len(f.pending) == 0 {
		return Fault{}, false
	}
	ft := f.pending[0]
	f.pending = f.pending[1:]
	return ft, true
}

// unarmed returns (and forgets) the handoff faults no request took.
func (f *fleet) unarmed() []Fault {
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	p := f.pending
	f.pending = nil
	return p
}

// recordFault records a handoff fault carried out by a request.
func (s *soakRun) recordFault(ft Fault, err error) {
	s.jmu.Lock()
	s.judge.Fault(ft, err)
	s.jmu.Unlock()
	fmt.Fprintf(s.cfg.Progress, "soak: fault %s%s\n", ft, errSuffix(err))
}

// doHandoff runs a handed-off op: the prefill request, the armed handoff fault if any, the
// decode request. Each step is retried as Client.Do retries, within one budget.
func (s *soakRun) doHandoff(ctx context.Context, op *Op) Outcome {
	f, c := s.f, s.client
	out := Outcome{Op: op, Cached: -1}
	deadline := time.Now().Add(c.Budget)
	proxy := f.proxies[op.Prefill]
	pbody, err := prefillBody(op.OracleBody)
	if err != nil {
		out.Status, out.Attempts, out.Errors = Lost, 1, []string{err.Error()}
		return out
	}
	var kv json.RawMessage
	_, ptries, ok := c.answer(ctx, deadline, &out, func() (answer, time.Duration, error) {
		var wait time.Duration
		var err error
		kv, wait, err = c.prefill(ctx, proxy.URL()+op.Path, pbody)
		return answer{}, wait, err
	})
	if !ok {
		out.Status, out.Attempts = Lost, ptries
		return out
	}
	var xfer struct {
		ID string `json:"remote_request_id"`
	}
	json.Unmarshal(kv, &xfer)
	dbody, err := withTransfer(op.Body, kv)
	if err != nil {
		out.Status, out.Attempts, out.Errors = Lost, ptries, append(out.Errors, err.Error())
		return out
	}
	decode := func() (answer, int, bool) {
		return c.answer(ctx, deadline, &out, func() (answer, time.Duration, error) {
			return c.try(ctx, op, f.direct[op.Via], dbody, op.Stream)
		})
	}
	var a answer
	var dtries int
	ft, hooked := f.takeHook()
	switch {
	case !hooked:
		a, dtries, ok = decode()
	case ft.Kind == PrefillKill9:
		p := f.replicas[op.Prefill]
		f.procs.Lock()
		kerr := p.Kill9()
		a, dtries, ok = decode()
		serr := p.Start(ctx)
		f.procs.Unlock()
		s.recordFault(ft, errors.Join(kerr, serr))
	case ft.Kind == LeaseExpire:
		lerr := waitExpired(ctx, f.direct[op.Prefill], xfer.ID, deadline)
		a, dtries, ok = decode()
		s.recordFault(ft, lerr)
	case ft.Kind == DecodeKillPull:
		dec := f.replicas[op.Via]
		s.hooks.Add(1)
		proxy.Arm(xfer.ID, &pullAction{before: func() {
			f.procs.Lock()
			kerr := dec.Kill9()
			go func() {
				defer s.hooks.Done()
				serr := dec.Start(ctx)
				f.procs.Unlock()
				s.recordFault(ft, errors.Join(kerr, serr))
			}()
		}})
		a, dtries, ok = decode()
		if proxy.Disarm(xfer.ID) {
			s.hooks.Done()
			f.arm(ft) // the decode never pulled (a prompt under a block): the next one
		}
	case ft.Kind == CorruptTransfer:
		s.hooks.Add(1)
		proxy.Arm(xfer.ID, &pullAction{corrupt: 4 + int64(op.ID*7919%2048), ended: func(flipped bool) {
			defer s.hooks.Done()
			if flipped {
				s.recordFault(ft, nil)
			} else {
				f.arm(ft) // the pull ended before the byte: the next one
			}
		}})
		a, dtries, ok = decode()
		if proxy.Disarm(xfer.ID) {
			s.hooks.Done()
			f.arm(ft)
		}
	default:
		a, dtries, ok = decode()
		s.recordFault(ft, fmt.Errorf("not a handoff fault"))
	}
	out.Attempts = ptries - 1 + dtries
	if !ok {
		out.Status = Lost
		return out
	}
	out.Status, out.Answer, out.Finish, out.Prompt, out.Cached = Answered, a.text, a.finish, a.prompt, a.cached
	out.Transfer, out.Remote = a.transfer, a.remote
	return out
}

// prefillBody is the request (not streamed) as vLLM's proxy sends it to a prefill replica.
func prefillBody(req []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req, &m); err != nil {
		return nil, err
	}
	delete(m, "stream_options")
	m["stream"], m["max_tokens"] = json.RawMessage("false"), json.RawMessage("1")
	m["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	return json.Marshal(m)
}

// withTransfer is the request with the prefill's kv_transfer_params, for the decode.
func withTransfer(req []byte, kv json.RawMessage) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req, &m); err != nil {
		return nil, err
	}
	m["kv_transfer_params"] = kv
	return json.Marshal(m)
}

// prefill makes one prefill request and returns the kv_transfer_params it answered with.
func (c *Client) prefill(ctx context.Context, u string, body []byte) (json.RawMessage, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(body))
	if err != nil {
		return nil, 0, errPermanent{err}
	}
	c.headers(req)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("prefill transport: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("prefill truncated body: %v", err)
	}
	if resp.StatusCode != 200 {
		err := fmt.Errorf("prefill status %d: %.300s", resp.StatusCode, bytes.TrimSpace(b))
		if resp.StatusCode >= 500 || resp.StatusCode == 429 || resp.StatusCode == 408 {
			return nil, retryAfter(resp), err
		}
		return nil, 0, errPermanent{err}
	}
	var r struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, 0, fmt.Errorf("prefill malformed body: %v", err)
	}
	if len(r.KV) == 0 || string(r.KV) == "null" {
		return nil, 0, errPermanent{fmt.Errorf("prefill answered without kv_transfer_params: %.300s", b)}
	}
	return r.KV, 0, nil
}

// waitExpired polls the prefill at base until it no longer holds transfer id (a GET without
// the chain root is a 403 while it holds it, a 404 once its lease expired).
func waitExpired(ctx context.Context, base, id string, deadline time.Time) error {
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/kv/transfer/"+id, nil)
		if err != nil {
			return err
		}
		resp, err := scrapeClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("transfer %s still held (or the prefill unreachable: %v) at the deadline", id, err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// pullAction is what a TransferProxy does to the next pull of one transfer.
type pullAction struct {
	// before runs before the pull would be forwarded; the pull is then answered 502 (the
	// replica that asked was killed).
	before func()
	// corrupt > 0: the byte at that offset of the stream is flipped; ended hears whether it
	// was (the stream may end first).
	corrupt int64
	ended   func(flipped bool)
}

type actionKey struct{}

// TransferProxy is an HTTP reverse proxy in front of one prefill replica: the soak's client
// sends prefill requests through it (so the transfers name it) and the decode replicas pull
// through it (it is their --prefill-peer). Arm makes it act on the next pull of a transfer.
type TransferProxy struct {
	srv   *http.Server
	ln    net.Listener
	tr    *http.Transport
	mu    sync.Mutex
	armed map[string]*pullAction
	acted atomic.Int64
}

// NewTransferProxy listens on a free loopback port and forwards to the replica at target.
func NewTransferProxy(target string) (*TransferProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TransferProxy{ln: ln, armed: map[string]*pullAction{}, tr: &http.Transport{IdleConnTimeout: time.Second}}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the Host: the prefill names the proxy
	rp.Transport = p.tr
	rp.FlushInterval = -1
	rp.ErrorLog = discardLogger
	rp.ModifyResponse = func(resp *http.Response) error {
		a, _ := resp.Request.Context().Value(actionKey{}).(*pullAction)
		if a == nil {
			return nil
		}
		if resp.StatusCode != http.StatusOK {
			a.ended(false)
			return nil
		}
		resp.Body = &flipBody{rc: resp.Body, at: a.corrupt, ended: a.ended}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if a, _ := r.Context().Value(actionKey{}).(*pullAction); a != nil {
			a.ended(false)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{ErrorLog: discardLogger, IdleTimeout: 2 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/kv/transfer/"); ok {
			if a := p.take(id); a != nil {
				p.acted.Add(1)
				if a.before != nil {
					a.before()
					http.Error(w, "the decode replica was killed mid-pull", http.StatusBadGateway)
					return
				}
				r = r.WithContext(context.WithValue(r.Context(), actionKey{}, a))
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go p.srv.Serve(ln)
	return p, nil
}

// URL is the proxy's base URL.
func (p *TransferProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Arm makes the proxy carry out a on the next pull of transfer id.
func (p *TransferProxy) Arm(id string, a *pullAction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed[id] = a
}

// Disarm drops the action armed for id and reports whether it was still armed (no pull of
// id came).
func (p *TransferProxy) Disarm(id string) bool { return p.take(id) != nil }

func (p *TransferProxy) take(id string) *pullAction {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.armed[id]
	delete(p.armed, id)
	return a
}

// Close stops the proxy.
func (p *TransferProxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.srv.Shutdown(ctx)
	p.srv.Close()
	p.tr.CloseIdleConnections()
}

// flipBody flips the byte at offset at of the stream it reads.
type flipBody struct {
	rc      io.ReadCloser
	at, pos int64
	flipped bool
	once    sync.Once
	ended   func(bool)
}

func (b *flipBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if !b.flipped && b.at >= b.pos && b.at < b.pos+int64(n) {
		p[b.at-b.pos] ^= 0x5a
		b.flipped = true
	}
	b.pos += int64(n)
	return n, err
}

func (b *flipBody) Close() error {
	b.once.Do(func() { b.ended(b.flipped) })
	return b.rc.Close()
}

// retryAfter is a response's Retry-After in seconds (0: none).
func retryAfter(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		return time.Duration(s) * time.Second
	}
	return 0
}

// handoffChecks records, after the traffic, that handed-off requests were answered and
// notes what the replicas counted (since their last restart): blocks served and pulled,
// failed pulls, expired leases.
func (s *soakRun) handoffChecks() {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	r := s.judge.Report()
	s.judge.AddCheck(Check{Name: "handoffs answered", OK: r.Handoffs > 0,
		Detail: fmt.Sprintf("%d handed-off requests answered, %d prompt tokens by transfer", r.Handoffs, r.TransferTokens)})
	var served, expired, pulled, failed float64
	for i, base := range s.f.direct {
		m, err := scrape(base)
		if err != nil {
			continue
		}
		if i < s.cfg.Prefills {
			served += m[`stockpot_kv_transfer_blocks_total{direction="served"}`]
			expired += m["stockpot_kv_transfer_leases_expired_total"]
		} else {
			pulled += m[`stockpot_kv_transfer_blocks_total{direction="pulled"}`]
			failed += m[`stockpot_kv_transfer_failures_total{reason="pull"}`]
		}
	}
	acted := int64(0)
	for _, tp := range s.f.proxies {
		acted += tp.acted.Load()
	}
	s.judge.AddNote(fmt.Sprintf("handoff (counted since each replica's last start): prefills served %.0f blocks, %.0f leases expired; decodes pulled %.0f blocks, %.0f pulls failed; the proxies acted on %d pulls",
		served, expired, pulled, failed, acted))
}
