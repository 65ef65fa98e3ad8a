package router

import (
	"fmt"
	"sync"
	"time"
)

// Passive health (outlier detection, after Envoy's): the router watches the answers it
// proxies, and a backend whose requests keep failing is ejected for a while even though its
// /health still says ok (a replica whose engine answers 503 to everything, a proxy in front
// of a dead one). Active health (Router.check) and passive health are independent: a backend
// takes routed requests only while both let it.
//
// The state machine is pure: no goroutine, no I/O, the time passed in. The router feeds it
// each attempt's outcome and asks it which backends may take a request (outliers below);
// testdata/outlier scripts step it on a fake clock.
//
// Per backend:
//
//	state      takes routed requests   takes /tokenize   leaves by
//	in service yes                     yes               Consecutive failures in a row → ejected
//	ejected    no                      no                its ejection time ending, or an active health
//	                                                     pass after BaseEjection → half-open
//	half-open  one request (the probe) no                a request starting on it → probing
//	probing    no (the probe is out)   no                its success → in service; its failure →
//	                                                     ejected again, longer; no verdict → half-open
//
// What counts. A failure is an answer of status 5xx, a connection error, a timeout or a
// stream the backend cut. A success is any other answer, 4xx included (the client's mistake,
// not the backend's): it resets the count. A request the client abandoned says nothing of the
// backend and counts as neither.
//
// Ejection time is BaseEjection × the backend's ejections in a row, at most MaxEjection; the
// multiplier is forgotten once the backend has served MaxEjection in service since it last
// came back. At most MaxEjectedPercent of the fleet (rounded down) is out at once (ejected,
// half-open or probing): past it a failing backend stays in, so the last backends keep
// serving whatever they answer (a fleet of one is never ejected at the default 50%).
type OutlierConfig struct {
	// Consecutive failures in a row that eject a backend (--outlier-failures). Default 5;
	// negative turns passive health off.
	Consecutive int
	// BaseEjection is the first ejection's length (--outlier-ejection). Default 30s.
	BaseEjection time.Duration
	// MaxEjection caps an ejection's length. Default 5m; never below BaseEjection (raised to
	// it).
	MaxEjection time.Duration
	// MaxEjectedPercent of the backends may be out at once, rounded down. Default 50.
	MaxEjectedPercent int
}

// DefaultOutlierConfig returns the defaults.
func DefaultOutlierConfig() OutlierConfig {
	return OutlierConfig{Consecutive: 5, BaseEjection: 30 * time.Second, MaxEjection: 5 * time.Minute, MaxEjectedPercent: 50}
}

// validate fills zero values with the defaults; c is a copy.
func (c OutlierConfig) validate() (OutlierConfig, error) {
	d := DefaultOutlierConfig()
	if c.BaseEjection < 0 || c.MaxEjection < 0 || c.MaxEjectedPercent < 0 || c.MaxEjectedPercent > 100 {
		return c, fmt.Errorf("router: outlier ejection %v, max %v must not be negative, max ejected %d%% within [0, 100]",
			c.BaseEjection, c.MaxEjection, c.MaxEjectedPercent)
	}
	if c.Consecutive == 0 {
		c.Consecutive = d.Consecutive
	}
	if c.BaseEjection == 0 {
		c.BaseEjection = d.BaseEjection
	}
	if c.MaxEjection == 0 {
		c.MaxEjection = d.MaxEjection
	}
	c.MaxEjection = max(c.MaxEjection, c.BaseEjection)
	if c.MaxEjectedPercent == 0 {
		c.MaxEjectedPercent = d.MaxEjectedPercent
	}
	return c, nil
}

// outlierState is a backend's passive-health state (see the table on OutlierConfig).
type outlierState uint8

const (
	inService outlierState = iota
	ejected
	halfOpen
	probing
)

func (s outlierState) String() string {
	return [...]string{"in-service", "ejected", "half-open", "probing"}[s]
}

// outlierHost is one backend's record.
type outlierHost struct {
	state       outlierState
	consecutive int       // failures in a row
	ejections   int       // ejections in a row: the ejection time's multiplier
	ejectedAt   time.Time // when the current ejection began (ejected, half-open, probing)
	until       time.Time // ejected: when it turns half-open
	back        time.Time // in service: when it last came back (for the multiplier's reset)
}

// outlierEvent is what a call changed, for the caller's log and metrics.
type outlierEvent uint8

const (
	noChange outlierEvent = iota
	ejectedNow
	returnedNow
)

// outliers is the fleet's passive health: one outlierHost per backend ID, created in
// service on first sight. Safe for concurrent use.
type outliers struct {
	cfg OutlierConfig
	mu  struct {
		sync.Mutex
		hosts map[string]*outlierHost
		out   int // hosts not in service; protected by mu
	}
}

func newOutliers(cfg OutlierConfig) *outliers {
	o := &outliers{cfg: cfg}
	o.mu.hosts = map[string]*outlierHost{}
	return o
}

func (o *outliers) off() bool { return o.cfg.Consecutive < 0 }

// hostLocked returns id's record, creating it in service. REQUIRES: o.mu held.
func (o *outliers) hostLocked(id string) *outlierHost {
	h := o.mu.hosts[id]
	if h == nil {
		h = &outlierHost{}
		o.mu.hosts[id] = h
	}
	return h
}

// dueLocked turns an ejected host whose time has come half-open. REQUIRES: o.mu held.
func dueLocked(h *outlierHost, now time.Time) {
	if h.state == ejected && !now.Before(h.until) {
		h.state = halfOpen
	}
}

// candidate reports whether id may be offered a routed request now: in service, or
// half-open (its probe is free).
func (o *outliers) candidate(id string, now time.Time) bool {
	if o.off() {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hostLocked(id)
	dueLocked(h, now)
	return h.state == inService || h.state == halfOpen
}

// serving reports whether id is in service: what /tokenize and other calls that are not a
// probe need.
func (o *outliers) serving(id string, now time.Time) bool {
	if o.off() {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hostLocked(id)
	dueLocked(h, now)
	return h.state == inService
}

// start is called as a routed request is sent to id. A half-open host's request becomes its
// probe. false: id may not take it (another request took the probe since candidate said
// yes, or it was ejected meanwhile); the caller picks again without it.
func (o *outliers) start(id string, now time.Time) bool {
	if o.off() {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hostLocked(id)
	dueLocked(h, now)
	switch h.state {
	case inService:
		return true
	case halfOpen:
		h.state = probing
		return true
	}
	return false
}

// success records an answer that was not a failure. A probe's success returns the host.
func (o *outliers) success(id string, now time.Time) outlierEvent {
	if o.off() {
		return noChange
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hostLocked(id)
	h.consecutive = 0
	switch h.state {
	case probing:
		h.state, h.back = inService, now
		o.mu.out--
		return returnedNow
	case inService:
		if h.ejections > 0 && now.Sub(h.back) >= o.cfg.MaxEjection {
			h.ejections = 0 // served its longest ejection's length since: start afresh
		}
	}
	return noChange
}

// failure records a failed answer from id in a fleet of fleet backends. It ejects id when
// its failures in a row reach Consecutive and the fleet has room to lose it, and re-ejects a
// failed probe (longer).
func (o *outliers) failure(id string, now time.Time, fleet int) outlierEvent {
	if o.off() {
		return noChange
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hostLocked(id)
	h.consecutive++
	switch h.state {
	case probing:
		o.ejectLocked(h, now) // already counted out
		return ejectedNow
	case inService:
		if h.consecutive >= o.cfg.Consecutive && o.mu.out < fleet*o.cfg.MaxEjectedPercent/100 {
			o.mu.out++
			o.ejectLocked(h, now)
			return ejectedNow
		}
	}
	return noChange
}

// ejectLocked starts an ejection of h (the caller counts it out). REQUIRES: o.mu held.
func (o *outliers) ejectLocked(h *outlierHost, now time.Time) {
	h.ejections++
	d := o.cfg.MaxEjection
	if h.ejections <= int(o.cfg.MaxEjection/o.cfg.BaseEjection) { // no overflow on a long run
		d = min(o.cfg.BaseEjection*time.Duration(h.ejections), o.cfg.MaxEjection)
	}
	h.state, h.ejectedAt, h.until, h.consecutive = ejected, now, now.Add(d), 0
}

// abandon records that a request started on id ended with no verdict (the client left): a
// probe's slot is freed for the next request.
func (o *outliers) abandon(id string) {
	if o.off() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.hostLocked(id); h.state == probing {
		h.state = halfOpen
	}
}

// healthPass records a passed active health check: an ejected host that has been out at
// least BaseEjection turns half-open at once (its probe decides), rather than waiting out a
// long ejection. A host whose /health passes while its requests fail so probes at most once
// a BaseEjection.
func (o *outliers) healthPass(id string, now time.Time) {
	if o.off() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.hostLocked(id); h.state == ejected && !now.Before(h.ejectedAt.Add(o.cfg.BaseEjection)) {
		h.state = halfOpen
	}
}

// remove forgets id (it left the fleet; a re-add starts in service).
func (o *outliers) remove(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.mu.hosts[id]; h != nil {
		if h.state != inService {
			o.mu.out--
		}
		delete(o.mu.hosts, id)
	}
}

// ejectedCount returns how many backends are out (ejected, half-open or probing).
func (o *outliers) ejectedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.out
}

// state returns id's state and failures in a row (status, tests).
func (o *outliers) state(id string, now time.Time) (outlierState, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.mu.hosts[id]
	if h == nil {
		return inService, 0
	}
	dueLocked(h, now)
	return h.state, h.consecutive
}
