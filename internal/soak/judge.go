package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Status is how a request ended for the client.
type Status uint8

const (
	Answered  Status = iota // a complete answer (finish_reason set, stream closed by [DONE])
	Cancelled               // the client gave up on purpose (Cancel, Disconnect)
	Lost                    // no complete answer and no clean error within the retry budget
)

// Outcome is one op's end, as the client saw it.
type Outcome struct {
	Op       *Op
	Status   Status
	Answer   string // the judged text: content, or tool calls as name(arguments)
	Finish   string
	Attempts int      // tries made (1 = no retry)
	Errors   []string // why each retried try failed ("status 503", "truncated stream", ...)
	Cached   int      // cached_tokens reported on the answer, -1 when not reported
	Prompt   int
	// Transfer and Remote are the answer's usage.cache transfer_tokens and remote_tokens.
	Transfer, Remote int
}

// Judge compares outcomes with the oracle's answers and tallies the run. It is not safe for
// concurrent use.
type Judge struct {
	r Report
}

// Report is a run's result.
type Report struct {
	Requests, Answered, Judged, Cancelled int
	Wrong, Lost                           int
	Retried                               int // requests that needed more than one try
	ByKind                                map[string]int
	RetryReasons                          map[string]int
	PromptTokens, CachedTokens            int
	// Handoffs is the handed-off requests answered (prefill, then decode); of their prompt
	// tokens, TransferTokens came by transfer and HandoffRemoteTokens from the remote tier.
	Handoffs, TransferTokens, HandoffRemoteTokens int
	WrongExamples, LostExamples                   []string
	Faults                                        map[string]int
	FaultErrors                                   []string // a fault that could not be injected, and why
	Checks                                        []Check
	Notes                                         []string
}

// Check is one budget or leak check.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// NewJudge returns an empty judge.
func NewJudge() *Judge {
	return &Judge{r: Report{ByKind: map[string]int{}, RetryReasons: map[string]int{}, Faults: map[string]int{}}}
}

// Record tallies o; oracle is the oracle's answer for o.Op (ignored for ops not judged).
func (j *Judge) Record(o Outcome, oracle string) {
	r := &j.r
	r.Requests++
	r.ByKind[o.Op.Kind.String()]++
	if o.Attempts > 1 {
		r.Retried++
	}
	for _, e := range o.Errors {
		r.RetryReasons[reason(e)]++
	}
	switch o.Status {
	case Cancelled:
		r.Cancelled++
		return
	case Lost:
		r.Lost++
		if len(r.LostExamples) < 10 {
			r.LostExamples = append(r.LostExamples, fmt.Sprintf("op %d (%s via %s): %s", o.Op.ID, o.Op.Kind, o.Op.Target(), strings.Join(o.Errors, "; ")))
		}
		return
	}
	r.Answered++
	r.PromptTokens += o.Prompt
	if o.Cached > 0 {
		r.CachedTokens += o.Cached
	}
	if o.Op.Handoff {
		r.Handoffs++
		r.TransferTokens += o.Transfer
		r.HandoffRemoteTokens += o.Remote
	}
	if o.Op.OracleBody == nil {
		return
	}
	r.Judged++
	if o.Answer != oracle {
		r.Wrong++
		if len(r.WrongExamples) < 10 {
			r.WrongExamples = append(r.WrongExamples, fmt.Sprintf("op %d (%s via %s, %d cached, finish %s, %d tries %v): got %q, oracle %q", o.Op.ID, o.Op.Kind, o.Op.Target(), o.Cached, o.Finish, o.Attempts, o.Errors, o.Answer, oracle))
		}
	}
}

// reason is an error's class, for the retry tally: its text up to the first colon.
func reason(e string) string {
	if i := strings.IndexByte(e, ':'); i > 0 {
		return e[:i]
	}
	return e
}

// Fault tallies an injected fault, or one that could not be injected.
func (j *Judge) Fault(f Fault, err error) {
	if err != nil {
		j.r.FaultErrors = append(j.r.FaultErrors, fmt.Sprintf("%s: %v", f, err))
		return
	}
	j.r.Faults[f.Kind.String()]++
}

// AddCheck records a budget or leak check.
func (j *Judge) AddCheck(c Check) { j.r.Checks = append(j.r.Checks, c) }

// AddNote records a line for the report.
func (j *Judge) AddNote(n string) { j.r.Notes = append(j.r.Notes, n) }

// Report returns the tally.
func (j *Judge) Report() Report { return j.r }

// OK reports whether the run passed: nothing wrong, nothing lost, every check held.
func (r Report) OK() bool {
	if r.Wrong != 0 || r.Lost != 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// String is the report as the command prints it.
func (r Report) String() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "soak %s: %d requests, %d answered (%d judged against the oracle), %d cancelled by the client\n", verdict, r.Requests, r.Answered, r.Judged, r.Cancelled)
	fmt.Fprintf(&b, "  wrong %d, lost %d; %d requests retried by the client\n", r.Wrong, r.Lost, r.Retried)
	if r.PromptTokens > 0 {
		fmt.Fprintf(&b, "  cached tokens %d of %d prompt tokens (%.1f%%)\n", r.CachedTokens, r.PromptTokens, 100*float64(r.CachedTokens)/float64(r.PromptTokens))
	}
	fmt.Fprintf(&b, "  kinds: %s\n", counts(r.ByKind))
	if r.Handoffs > 0 {
		fmt.Fprintf(&b, "  handed off (prefill, then decode): %d answered; %d prompt tokens by transfer, %d from the remote tier\n", r.Handoffs, r.TransferTokens, r.HandoffRemoteTokens)
	}
	fmt.Fprintf(&b, "  faults injected: %s\n", counts(r.Faults))
	if len(r.RetryReasons) > 0 {
		fmt.Fprintf(&b, "  retry reasons: %s\n", counts(r.RetryReasons))
	}
	for _, e := range r.FaultErrors {
		fmt.Fprintf(&b, "  fault not injected: %s\n", e)
	}
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.Name, c.Detail)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, e := range r.WrongExamples {
		fmt.Fprintf(&b, "  wrong: %s\n", e)
	}
	for _, e := range r.LostExamples {
		fmt.Fprintf(&b, "  lost: %s\n", e)
	}
	return b.String()
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
