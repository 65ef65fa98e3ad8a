package grammar

import (
	"errors"
	"fmt"
	"unsafe"
)

// Limits bounds what building one grammar may cost. A schema is first sized by
// EstimateSchema's walk (linear in the schema, allocating nothing in proportion to the
// grammar) and refused when its estimate is over MaxBytes; what passes is compiled under
// MaxBytes and MaxSteps, so a grammar the estimate got wrong still stops at its bound.
type Limits struct {
	// MaxBytes bounds the bytes the compiler allocates for one grammar: its ops, rules, maps
	// and temporaries as it counts them (the schema's node graph, built before, costs about as
	// much again). EstimateSchema's estimate is in the same unit. 0: DefaultLimits'.
	MaxBytes int64
	// MaxSteps bounds the compiler's work, in nodes visited and ops written or scanned (a
	// step is a few nanoseconds); it catches grammars whose analysis is not linear in their
	// size, such as a long chain of references. 0: DefaultLimits'.
	MaxSteps int64
}

// DefaultLimits returns the default bounds.
func DefaultLimits() Limits {
	return Limits{
		// 64 MiB is some 700,000 ops of JSON-schema grammar: agents' largest tool sets
		// (hundreds of properties) take a few percent of it.
		MaxBytes: 64 << 20,
		// 2^26 steps is well under a second; a grammar within MaxBytes whose analyses are
		// linear takes a few steps per op.
		MaxSteps: 1 << 26,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = d.MaxSteps
	}
	return l
}

// ErrBudget is wrapped by every *BudgetError.
var ErrBudget = errors.New("grammar: over budget")

// BudgetError is a grammar refused for its size: by its estimate before anything was built,
// or by the compiler when it passed a bound.
type BudgetError struct {
	Estimated bool   // refused by EstimateSchema's estimate, before building
	Resource  string // "bytes" or "steps"
	Amount    int64  // the estimate, or what was spent when the compiler stopped
	Limit     int64
}

func (e *BudgetError) Error() string {
	if e.Estimated {
		return fmt.Sprintf("grammar: the grammar is estimated at %s to compile, over the bound of %s", FormatBytes(e.Amount), FormatBytes(e.Limit))
	}
	if e.Resource == "steps" {
		return fmt.Sprintf("grammar: compiling the grammar took more than %d steps (the bound) and was stopped", e.Limit)
	}
	return fmt.Sprintf("grammar: compiling the grammar took more than %s (the bound) and was stopped", FormatBytes(e.Limit))
}

// Is makes errors.Is(err, ErrBudget) and errors.Is(err, ErrGrammar) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget || target == ErrGrammar }

// FormatBytes writes n in binary units, as the errors here do.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Sizes the compiler counts its allocations in.
const (
	opBytes          = int64(unsafe.Sizeof(op{}))
	sliceHeaderBytes = int64(unsafe.Sizeof([]int32(nil)))
	untilBytes       = int64(unsafe.Sizeof(until{}))
	// mapEntryBytes is a pointer-keyed map entry with its share of buckets and overhead.
	mapEntryBytes = 48
)

// budget is what one compilation has spent against its Limits.
type budget struct {
	lim          Limits
	bytes, steps int64
}

// spend adds steps and bytes, and returns a *BudgetError once either passes its bound.
func (b *budget) spend(steps, bytes int64) error {
	b.steps += steps
	b.bytes += bytes
	if b.bytes > b.lim.MaxBytes {
		return &BudgetError{Resource: "bytes", Amount: b.bytes, Limit: b.lim.MaxBytes}
	}
	if b.steps > b.lim.MaxSteps {
		return &BudgetError{Resource: "steps", Amount: b.steps, Limit: b.lim.MaxSteps}
	}
	return nil
}

func (b *budget) step(n int64) error { return b.spend(n, 0) }

// Bytes is about what g holds: its ops, rules and stop strings, and the tables built for
// each vocabulary so far (states, transitions, remembered masks), which grow as matchers
// run. Caches bound themselves by it.
func (g *Grammar) Bytes() int64 {
	n := int64(len(g.ops))*opBytes + int64(len(g.rules))*sliceHeaderBytes + int64(len(g.untils))*untilBytes
	for _, pcs := range g.rules {
		n += 4 * int64(len(pcs))
	}
	for _, u := range g.untils {
		n += 9 * int64(len(u.stop))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.tables {
		t.mu.Lock()
		// a state: its struct, its stack list and its key in stateID (a few stacks each)
		n += int64(len(t.states))*(int64(unsafe.Sizeof(state{}))+64) + int64(len(t.next))*4 +
			int64(len(t.frames))*(int64(unsafe.Sizeof(frame{}))+4+mapEntryBytes) + int64(t.memoBytes)
		t.mu.Unlock()
	}
	return n
}
