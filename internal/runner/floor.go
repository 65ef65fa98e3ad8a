package runner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
	"stockpot/internal/prefix"
)

// The TTFT floor (--ttft-floor): a shared prefix cache makes a hit visible in the time to the
// first token (arXiv 2411.18191 tells a hit from a miss with an AUC of 0.99 from 8 tokens), and
// in the usage object, so a principal could learn what another one sent by timing guesses.
// With a floor on, a request whose prompt holds any block its principal does not know is
// answered as if it had computed everything past the prefix the principal does know:
//
//   - What a principal knows: the blocks of prompts it sent (and of the answers it got),
//     recorded by this server per block (ledger, keyed by a hash chain over the cache salt and
//     the tokens, as the engine's). A block someone else sent, a public or prewarmed block, a
//     block restored from a tier after a restart, or one the ledger has forgotten, is unknown.
//   - The decision is made before the engine sees the request and reads only the ledger, never
//     the cache: whether the blocks are actually cached must not change how the request is
//     treated, or the treatment would leak what the timing no longer does. So a miss of a new
//     prompt is "padded" too; its pad is usually small, as its own compute takes about as long.
//   - Its first token comes no sooner than target = max(floor, estimate(n − known)) after the
//     request reached the engine, where n is the prompt's length, known the tokens of its longest prefix of
//     known blocks, and estimate a high quantile (missQuantile) of this server's observed time
//     to first token for that many computed tokens (missEstimator: a linear fit of TTFT on
//     computed tokens, times the quantile of the observed/fitted ratios). The floor is the
//     estimate's lower bound. CalibrateFloor seeds the estimate at start from a few misses
//     of the engine's own, so it holds from the first request; without it the floor alone
//     is the target until estimatorMinSamples requests were seen.
//   - The engine computes it as that miss (Request.MaxReuseTokens = known, the charge): it
//     takes nothing past the known prefix from any cache, device, tier or another request's
//     in-flight blocks. A hit cut short by the cache would otherwise show in the schedule:
//     other streams' decode steps wait for a miss's prefill and not for a hit's, so a
//     concurrent stream's token gaps told them apart where the TTFT did not. Computed, the
//     hit costs what the miss costs, in its own time and in everyone else's.
//   - Every later output is shifted by the same pad (deliverShifted), so the gaps between
//     tokens stay what they were: a burst of tokens made during the pad would tell a hit.
//   - The usage the client gets reads like that miss: reuse past the known prefix is reported
//     as computed, ttft_ms is the padded time, restore_ms 0, discarded tokens and the miss
//     explanation are dropped, pins count as created. The metrics count the same usage (the
//     engine's own evidence counters keep the real account); stockpot_ttft_floor_* count the
//     padded requests, their pad and the masked tokens.
//   - After the first token the principal knows the prompt's blocks (it was charged a miss for
//     them), and after the answer the answer's: its next turn or its repeat is not padded.
//
// Cost: a principal's own repeats and continuations are not padded; new prompts pay the
// difference between their TTFT and the estimate's quantile (small: the quantile's tail), and
// hits on blocks the principal does not know pay the whole miss, in compute too. The threat
// model, and what stays open, is in docs/tenants.md.

// missQuantile is the quantile of observed/fitted TTFT ratios the target uses: a hit padded to
// the p95 of misses looks like 95% of misses, so a threshold on TTFT separates at most the 5%
// slowest misses (an AUC near 0.5 + 0.05/2).
const missQuantile = 0.95

// ledgerBlocks bounds the ledger: 2^17 blocks (2M tokens at 16 per block) of about 100 bytes
// each. A forgotten block is unknown again: it costs its principal a pad, never a leak.
const ledgerBlocks = 1 << 17

// ledgerKnowers is how many principals a block remembers; a fifth replaces the oldest.
const ledgerKnowers = 4

type blockKey [16]byte

// floorKeys returns the chain keys of tokens' full blocks of bs tokens under salt, extending
// prev (the keys of the blocks before tokens[from:]); from must be a multiple of bs.
func floorKeys(salt string, tokens []int32, bs int, prev []blockKey) []blockKey {
	var parent blockKey
	if len(prev) == 0 {
		sum := sha256.Sum256(append([]byte("stockpot ttft floor\x00"), salt...))
		copy(parent[:], sum[:])
	} else {
		parent = prev[len(prev)-1]
	}
	keys := prev
	buf := make([]byte, 0, len(parent)+4*bs)
	for i := len(prev) * bs; i+bs <= len(tokens); i += bs {
		buf = append(buf[:0], parent[:]...)
		for _, t := range tokens[i : i+bs] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		sum := sha256.Sum256(buf)
		copy(parent[:], sum[:])
		keys = append(keys, parent)
	}
	return keys
}

// principalHash is a principal's ID in the ledger (a 64-bit collision would let one principal
// skip another's pad: 2^-64 per pair).
func principalHash(id string) uint64 {
	sum := sha256.Sum256([]byte(id))
	return binary.LittleEndian.Uint64(sum[:8])
}

// ledger remembers which principals know which blocks, the least recently touched forgotten
// first.
type ledger struct {
	mu struct {
		sync.Mutex
		m          map[blockKey]*ledgerEntry // protected by mu
		head, tail *ledgerEntry              // protected by mu; most recent at head
	}
	cap int
}

type ledgerEntry struct {
	key        blockKey
	who        [ledgerKnowers]uint64
	n, next    uint8 // knowers held, slot the next new one takes when full
	prev, succ *ledgerEntry
}

func newLedger(capacity int) *ledger {
	l := &ledger{cap: capacity}
	l.mu.m = make(map[blockKey]*ledgerEntry)
	return l
}

// knownPrefix returns how many of keys, from the first, p knows.
func (l *ledger) knownPrefix(p uint64, keys []blockKey) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys {
		e := l.mu.m[k]
		if e == nil || !slices.Contains(e.who[:e.n], p) {
			return i
		}
		l.touchLocked(e)
	}
	return len(keys)
}

// learn records that p knows keys.
func (l *ledger) learn(p uint64, keys []blockKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		e := l.mu.m[k]
		if e == nil {
			e = &ledgerEntry{key: k}
			l.mu.m[k] = e
			l.pushLocked(e)
			if len(l.mu.m) > l.cap {
				old := l.mu.tail
				l.unlinkLocked(old)
				delete(l.mu.m, old.key)
			}
		} else {
			l.touchLocked(e)
		}
		switch {
		case slices.Contains(e.who[:e.n], p):
		case int(e.n) < ledgerKnowers:
			e.who[e.n] = p
			e.n++
		default:
			e.who[e.next] = p
			e.next = (e.next + 1) % ledgerKnowers
		}
	}
}

// len is the number of blocks remembered.
func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.m)
}

func (l *ledger) pushLocked(e *ledgerEntry) {
	e.prev, e.succ = nil, l.mu.head
	if l.mu.head != nil {
		l.mu.head.prev = e
	}
	l.mu.head = e
	if l.mu.tail == nil {
		l.mu.tail = e
	}
}

func (l *ledger) unlinkLocked(e *ledgerEntry) {
	if e.prev != nil {
		e.prev.succ = e.succ
	} else {
		l.mu.head = e.succ
	}
	if e.succ != nil {
		e.succ.prev = e.prev
	} else {
		l.mu.tail = e.prev
	}
	e.prev, e.succ = nil, nil
}

func (l *ledger) touchLocked(e *ledgerEntry) {
	if l.mu.head != e {
		l.unlinkLocked(e)
		l.pushLocked(e)
	}
}

// missEstimator predicts a high quantile of the time to first token for a given number of
// computed tokens, from what this server observed: a least-squares line through (computed
// tokens, TTFT) with exponentially decayed weights (the server's load changes), plus the
// missQuantile of the last estimatorResiduals residuals (observed − fitted). Residuals are
// added, not ratios multiplied: the noise of a busy host is mostly scheduling delay, a few
// milliseconds whatever the prompt, which ratios over short prompts would blow up.
type missEstimator struct {
	mu struct {
		sync.Mutex
		sw, sx, sy, sxx, sxy float64 // decayed sums; protected by mu
		resid                [estimatorResiduals]float64
		n                    int // samples seen; protected by mu
	}
}

const (
	// estimatorDecay weighs the last few hundred requests (1/(1−0.995) = 200).
	estimatorDecay = 0.995
	// estimatorResiduals: residuals kept for the quantile; at 256 the p95 rests on 13.
	estimatorResiduals = 256
	// estimatorMinSamples before the estimate is used (the floor alone until then).
	estimatorMinSamples = 16
)

// fitLocked returns the line's intercept and slope (both clamped at 0: TTFT never falls with
// more tokens to compute). REQUIRES: mu held.
func (e *missEstimator) fitLocked() (a, b float64) {
	m := &e.mu
	if m.sw == 0 {
		return 0, 0
	}
	mx, my := m.sx/m.sw, m.sy/m.sw
	if v := m.sxx/m.sw - mx*mx; v > 1e-9 {
		b = max((m.sxy/m.sw-mx*my)/v, 0)
	}
	return max(my-b*mx, 0), b
}

// observe adds a request that computed x tokens and got its first token after y.
func (e *missEstimator) observe(x int, y time.Duration) {
	if y <= 0 {
		return
	}
	fx, fy := float64(x), y.Seconds()
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.mu
	if m.n > 0 {
		a, b := e.fitLocked()
		m.resid[(m.n-1)%estimatorResiduals] = fy - (a + b*fx)
	}
	m.sw, m.sx, m.sy = m.sw*estimatorDecay+1, m.sx*estimatorDecay+fx, m.sy*estimatorDecay+fy
	m.sxx, m.sxy = m.sxx*estimatorDecay+fx*fx, m.sxy*estimatorDecay+fx*fy
	m.n++
}

// estimate is the predicted missQuantile TTFT for x computed tokens; 0 until
// estimatorMinSamples requests were observed.
func (e *missEstimator) estimate(x int) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := &e.mu
	if m.n < estimatorMinSamples {
		return 0
	}
	k := min(m.n-1, estimatorResiduals)
	rs := slices.Clone(m.resid[:k])
	slices.Sort(rs)
	q := rs[min(int(missQuantile*float64(k)), k-1)]
	a, b := e.fitLocked()
	return time.Duration(max(a+b*float64(x)+max(q, 0), 0) * float64(time.Second))
}

// seed feeds samples (computed tokens, TTFT) round and round until the estimator has its
// estimatorMinSamples, so that its estimate is used from the next request on. The first
// rounds' residuals, against a fit of fewer points, are wide: the seeded estimate errs long
// until real requests outweigh it. Samples without a time are ignored.
func (e *missEstimator) seed(samples []floorSample) {
	samples = slices.DeleteFunc(slices.Clone(samples), func(f floorSample) bool { return f.ttft <= 0 })
	if len(samples) == 0 {
		return
	}
	for i := 0; e.samples() < estimatorMinSamples; i++ {
		f := samples[i%len(samples)]
		e.observe(f.computed, f.ttft)
	}
}

// samples is how many observations the estimator has seen.
func (e *missEstimator) samples() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.n
}

// floorSample is one observed miss: computed tokens and the time to the first token.
type floorSample struct {
	computed int
	ttft     time.Duration
}

const (
	// calibrationTokens is the longer of CalibrateFloor's two prompts: long enough that the
	// line's slope is the prefill's, short enough to cost a CPU-served 8B model a few seconds
	// at start. Longer prompts are extrapolated (attention makes them cost more: real misses
	// correct the line as they come).
	calibrationTokens = 256
	// CalibrationRounds: each length twice, the first of each paying any warm-up.
	CalibrationRounds = 2
)

// CalibrateFloor seeds the TTFT floor's miss estimator from misses the engine computes now:
// prompts of one block and calibrationTokens (within MaxPromptTokens), each under a salt of
// its own that nobody else can name and with MaxReuseTokens 0, so each is a miss, and with
// nothing offloaded. Their first-token times (the engine's own Usage.TTFTMs) seed the
// estimate (missEstimator.seed), so the floor protects from the first request, not from the
// estimatorMinSamples-th. Call it once, at start, before serving, when some request can have
// a floor; it returns the first engine error.
func (r *Runner) CalibrateFloor(ctx context.Context) error {
	long := min(calibrationTokens, r.cfg.MaxPromptTokens)
	ids := r.tok.Encode(strings.Repeat("calibrating the time to a first token. ", long/4+1), true, false)
	if len(ids) == 0 {
		return nil
	}
	prompt := make([]int32, long)
	for i := range prompt {
		prompt[i] = ids[i%len(ids)]
	}
	var samples []floorSample
	for range CalibrationRounds {
		for _, n := range []int{min(r.cfg.BlockSize+1, long), long} {
			u, err := r.calibrationMiss(ctx, prompt[:n])
			if err != nil {
				return fmt.Errorf("runner: calibrating the TTFT floor: %w", err)
			}
			samples = append(samples, floorSample{u.ComputedTokens, time.Duration(u.TTFTMs * float64(time.Millisecond))})
		}
	}
	r.floor.est.seed(samples)
	return nil
}

// calibrationMiss runs prompt as a one-token miss and returns its usage.
func (r *Runner) calibrationMiss(ctx context.Context, prompt []int32) (engine.Usage, error) {
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return engine.Usage{}, err
	}
	zero := 0
	req := &engine.Request{Prompt: prompt, MaxTokens: 1, IgnoreEOS: true, Logprobs: -1,
		CacheSalt: "\x00stockpot/calibration\x00" + string(salt[:]), MaxReuseTokens: &zero, MaxOffloadTokens: &zero}
	out, err := r.gen.Generate(ctx, req)
	if err != nil {
		return engine.Usage{}, err
	}
	var u *engine.Usage
	for o := range out {
		if o.Err != nil && err == nil {
			err = o.Err
		}
		if o.Done && o.Usage != nil {
			u = o.Usage
		}
	}
	if err == nil && u == nil {
		err = errors.New("the engine ended without usage")
	}
	if err != nil {
		return engine.Usage{}, err
	}
	return *u, nil
}

// floorState is the runner's part of the floor.
type floorState struct {
	ledger *ledger
	est    missEstimator
	// onPlan, when set (tests), sees every plan.
	onPlan func(FloorPlan)

	padded *prometheus.CounterVec // stockpot_ttft_floor_requests_total{padded}
	pad    prometheus.Counter     // stockpot_ttft_floor_pad_seconds_total
	masked prometheus.Counter     // stockpot_ttft_floor_masked_tokens_total
}

func newFloorState(reg prometheus.Registerer) (*floorState, error) {
	f := &floorState{ledger: newLedger(ledgerBlocks),
		padded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_ttft_floor_requests_total",
			Help: "Requests under a TTFT floor, by whether their prompt held blocks their principal did not know (padded=true: the first token waited for the floor's target)."}, []string{"padded"}),
		pad: prometheus.NewCounter(prometheus.CounterOpts{Name: "stockpot_ttft_floor_pad_seconds_total",
			Help: "Time the TTFT floor delayed first tokens (and every later output by as much)."}),
		masked: prometheus.NewCounter(prometheus.CounterOpts{Name: "stockpot_ttft_floor_masked_tokens_total",
			Help: "Reused prompt tokens reported as computed to clients under the TTFT floor (the usage counters count them as computed too)."}),
	}
	for _, c := range []prometheus.Collector{f.padded, f.pad, f.masked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	f.padded.WithLabelValues("true")
	f.padded.WithLabelValues("false")
	return f, nil
}

// FloorPlan is the floor's decision for one request, made before the engine sees it.
type FloorPlan struct {
	principal   uint64
	keys        []blockKey // the prompt's full blocks
	KnownTokens int        // tokens of the longest prefix of blocks the principal knows
	Padded      bool
	Target      time.Duration // padded: the first token's earliest time after at
	// at is when the plan was made, just before the engine got the request: the origin of the
	// target and of the TTFT the estimator learns (the wall clock, not Config.Now, which tests
	// may stop; what came before, parsing and tokenizing, does not depend on the cache).
	at time.Time
}

// planFloor returns ctx's principal's plan for spec, or nil when it has no floor.
func (r *Runner) planFloor(ctx context.Context, spec *pipeline.Spec) *FloorPlan {
	p, ok := principalOf(ctx)
	if !ok || p.TTFTFloor <= 0 {
		return nil
	}
	bs := r.cfg.BlockSize
	prompt := spec.Req.Prompt
	plan := &FloorPlan{principal: principalHash(p.ID), keys: floorKeys(spec.Req.CacheSalt, prompt, bs, nil), at: time.Now()}
	matchable := plan.keys[:min(prefix.MaxMatchBlocks(len(prompt), bs), len(plan.keys))]
	known := r.floor.ledger.knownPrefix(plan.principal, matchable)
	plan.KnownTokens = known * bs
	if known < len(matchable) {
		plan.Padded = true
		plan.Target = max(p.TTFTFloor, r.floor.est.estimate(len(prompt)-plan.KnownTokens))
		// The charge: computed past the known prefix, as the miss it is told as.
		spec.Req.MaxReuseTokens = &plan.KnownTokens
	}
	r.floor.padded.WithLabelValues(map[bool]string{true: "true", false: "false"}[plan.Padded]).Inc()
	if r.floor.onPlan != nil {
		r.floor.onPlan(*plan)
	}
	return plan
}

// floorRun follows one generation under the floor.
type floorRun struct {
	plan      *FloorPlan
	start     time.Time
	realFirst time.Time // when the engine's first output came (set before it is delivered)
	shownAt   time.Time // when the first output was delivered (padded)
}

// spinWindow is how much of a pad ends in a yield loop instead of a timer. A padded hit
// leaves the process idle, and an idle process wakes from its timer a scheduling delay late
// (milliseconds on a busy host) while a miss computing up to its first token is already
// running: the last stretch is spent on the CPU, as a miss would spend it. It costs up to 1ms
// of one core per padded output.
const spinWindow = time.Millisecond

// deliverShifted returns a channel with out's outputs, the first no sooner than deadline and
// each later one as long after its arrival as the first was delayed. It drains out to its end;
// once ctx ends it delivers at once (the client is gone or the generation cut). run.realFirst
// is set before the first output is sent.
func (r *Runner) deliverShifted(ctx context.Context, out <-chan engine.Output, deadline time.Time, run *floorRun) <-chan engine.Output {
	type stamped struct {
		o  engine.Output
		at time.Time
	}
	res := make(chan engine.Output)
	go func() {
		defer close(res)
		var (
			q     []stamped
			shift time.Duration = -1
			in                  = out
			timer               = time.NewTimer(time.Hour)
			done                = ctx.Done()
		)
		timer.Stop()
		defer timer.Stop()
		for in != nil || len(q) > 0 {
			var send chan<- engine.Output
			var next engine.Output
			if len(q) > 0 {
				due := q[0].at.Add(shift)
				wait := time.Until(due)
				if wait > spinWindow && done != nil {
					timer.Reset(wait - spinWindow)
				} else {
					for done != nil && time.Until(due) > 0 {
						runtime.Gosched() // see spinWindow
					}
					send, next = res, q[0].o
				}
			}
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					break
				}
				at := time.Now()
				if shift < 0 {
					run.realFirst = at
					shift = max(deadline.Sub(at), 0)
					r.floor.pad.Add(shift.Seconds())
				}
				q = append(q, stamped{o, at})
			case send <- next:
				q = q[1:]
			case <-timer.C:
			case <-done:
				done = nil
			}
			timer.Stop()
		}
	}()
	return res
}

// floorFirst is called when the first output reaches the client's side of generate: the
// principal now knows the prompt's blocks.
func (r *Runner) floorFirst(run *floorRun) {
	run.shownAt = time.Now()
	if run.realFirst.IsZero() {
		run.realFirst = run.shownAt
	}
	r.floor.ledger.learn(run.plan.principal, run.plan.keys)
}

// floorDone finishes a successful generation: the estimator learns its real TTFT, the
// principal learns the answer's blocks, and a padded request's usage is masked.
func (r *Runner) floorDone(run *floorRun, spec *pipeline.Spec, res *Result) {
	if run.realFirst.IsZero() {
		return
	}
	r.floor.est.observe(res.Usage.ComputedTokens, run.realFirst.Sub(run.start))
	if len(res.Tokens) > 0 {
		all := append(slices.Clip(spec.Req.Prompt), TokenIDs(res.Tokens)...)
		keys := floorKeys(spec.Req.CacheSalt, all, r.cfg.BlockSize, slices.Clip(run.plan.keys))
		r.floor.ledger.learn(run.plan.principal, keys[len(run.plan.keys):])
	}
	if run.plan.Padded {
		n := maskUsage(&res.Usage, run.plan.KnownTokens, run.shownAt.Sub(run.start))
		r.floor.masked.Add(float64(n))
	}
}

// maskUsage makes u read like a request that reused only its first known prompt tokens and
// got its first token after ttft, and returns how many reused tokens it reported as computed.
func maskUsage(u *engine.Usage, known int, ttft time.Duration) int {
	allow, masked := known, 0
	for _, p := range []*int{&u.DeviceTokens, &u.HostTokens, &u.DiskTokens, &u.RemoteTokens} {
		keep := min(*p, allow)
		masked += *p - keep
		*p, allow = keep, allow-keep
	}
	u.ComputedTokens += masked
	u.DiscardedTokens, u.DiscardedBy, u.Miss = 0, nil, nil
	for i := range u.Pins {
		p := &u.Pins[i]
		p.Created = max(p.Created, p.Pinned-min(p.Pinned, known))
	}
	ms := float64(ttft) / float64(time.Millisecond)
	u.TTFTMs, u.RestoreMs, u.PrefillMs = ms, 0, max(ms-u.QueueMs, 0)
	return masked
}
