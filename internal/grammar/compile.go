package grammar

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// The compiled form is a set of rules over one flat array of ops. A rule is a list of
// alternatives; an alternative is a run of ops that starts at its pc and ends with opEnd.
// Terminal ops (opByte, opUntil) consume bytes; opCall and opRepeat enter another rule.
// A matcher position is a stack of frames (see table.go).

type opKind uint8

const (
	opEnd    opKind = iota // end of an alternative: return to the caller
	opByte                 // one byte in [lo, hi]
	opUntil                // free text then a stop string: untils[arg]
	opCall                 // rule arg once
	opRepeat               // rule arg min..max times (frame.n counts the iterations done)
)

type op struct {
	kind     opKind
	lo, hi   byte
	arg      int32
	min, max int32 // opRepeat; max < 0: unbounded
}

type until struct {
	stop    []byte
	fail    []int32 // KMP failure function over stop's bytes
	chars   []int32 // chars[j]: characters in stop[:j]
	maxText int32   // < 0: unbounded
}

// Grammar is a compiled grammar. It is immutable apart from the per-vocabulary automaton
// tables it builds lazily (guarded by their own mutexes), and safe for concurrent use.
type Grammar struct {
	ops    []op
	rules  [][]int32 // rule -> pcs of its alternatives
	untils []until
	start  int32

	classOf  [256]uint8 // byte -> equivalence class: bytes of a class act alike on every op
	classRep []byte     // class -> one byte of it
	nClasses int

	mu     sync.Mutex
	tables map[*Vocab]*table
}

// ErrGrammar is wrapped by every error Compile returns.
var ErrGrammar = errors.New("grammar")

// Hard limits on compiled size, whatever the Limits: pcs and rule ids are int32, and a
// grammar this large is far past any budget worth granting.
const (
	maxOps   = 1 << 20
	maxRules = 1 << 18
	// maxNesting bounds how deep compileRule recurses (rules inside rules: a long chain of
	// $refs, an object with thousands of optional properties). Each level is a few hundred
	// bytes of goroutine stack, which no budget would otherwise see.
	maxNesting = 1 << 14
)

type compiler struct {
	g     *Grammar
	rule  map[*node]int32
	refs  map[*node]int // how many times each node is used (for inlining)
	err   error
	stack []int32
	b     *budget
	depth int // compileRule's recursion depth
}

// Compile turns root into a Grammar under DefaultLimits. It fails for construction errors
// carried by nodes, a Repeat whose item can match the empty string, left recursion, a
// grammar that matches nothing, or a grammar over the limits (a *BudgetError).
func Compile(root Node) (*Grammar, error) { return CompileWith(root, DefaultLimits()) }

// CompileWith is Compile under lim: the compiler counts the bytes of what it allocates (its
// ops, rules, maps and temporaries) and its steps, and stops with a *BudgetError as soon as
// either passes its bound, so a grammar too large costs at most about its bound.
func CompileWith(root Node, lim Limits) (*Grammar, error) {
	if root.n != nil && root.n.compiled != nil {
		return root.n.compiled, nil
	}
	g, _, err := compile(root, lim)
	return g, err
}

// compile is CompileWith, returning what it spent too (tests compare it to estimates).
func compile(root Node, lim Limits) (*Grammar, *budget, error) {
	c := &compiler{g: &Grammar{tables: map[*Vocab]*table{}}, rule: map[*node]int32{}, refs: map[*node]int{},
		b: &budget{lim: lim.withDefaults()}}
	r := root.get()
	if err := c.count(r); err != nil {
		return nil, c.b, err
	}
	c.g.start = c.compileRule(r)
	if c.err != nil {
		return nil, c.b, c.err
	}
	if err := c.g.check(c.b); err != nil {
		return nil, c.b, err
	}
	c.g.computeClasses()
	return c.g, c.b, nil
}

// count records use counts and surfaces construction errors (iteratively: graphs may be deep).
func (c *compiler) count(root *node) error {
	work := []*node{root}
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		c.refs[n]++
		if c.refs[n] > 1 {
			if err := c.b.step(1); err != nil {
				return err
			}
			continue
		}
		// a map entry (key, value, bucket share) and the node's place on the work list
		if err := c.b.spend(1, mapEntryBytes+8*int64(len(n.kids))); err != nil {
			return err
		}
		if n.err != nil {
			return fmt.Errorf("%w: %v", ErrGrammar, n.err)
		}
		if n.kind == kindRef && len(n.kids) == 0 {
			return fmt.Errorf("%w: unbound reference", ErrGrammar)
		}
		work = append(work, n.kids...)
	}
	return nil
}

func (c *compiler) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrGrammar}, args...)...)
	}
}

// charge spends steps and bytes of c's budget, recording the first overrun as c.err.
func (c *compiler) charge(steps, bytes int64) bool {
	if c.err != nil {
		return false
	}
	if err := c.b.spend(steps, bytes); err != nil {
		c.err = err
		return false
	}
	return true
}

// compileRule returns the rule of n, compiling it on first use.
func (c *compiler) compileRule(n *node) int32 {
	for hops := 0; n.kind == kindRef; hops++ {
		if hops > 1000 {
			c.fail("a reference refers only to itself")
			return 0
		}
		n = n.kids[0]
	}
	if id, ok := c.rule[n]; ok {
		return id
	}
	if c.err != nil {
		return 0
	}
	g := c.g
	id := int32(len(g.rules))
	if id >= maxRules {
		c.fail("more than %d rules", maxRules)
		return 0
	}
	if c.depth >= maxNesting {
		c.fail("rules nest deeper than %d", maxNesting)
		return 0
	}
	c.depth++
	defer func() { c.depth-- }()
	// the rule map's entry, and the rules slice's growth when it reallocates
	grow := int64(0)
	if len(g.rules) == cap(g.rules) {
		grow = int64(2*cap(g.rules)+1) * sliceHeaderBytes
	}
	if !c.charge(1, mapEntryBytes+grow) {
		return 0
	}
	c.rule[n] = id
	g.rules = append(g.rules, nil)
	var alts [][]op
	switch n.kind {
	case kindNever:
	case kindAlt:
		for _, k := range n.kids {
			alts = c.appendAlts(alts, k)
		}
	case kindChar:
		seqs := utf8Seqs(n.ranges)
		if !c.charge(int64(len(seqs)), int64(len(seqs))*(sliceHeaderBytes+4*opBytes)) {
			return 0
		}
		for _, s := range seqs {
			var seq []op
			for i := 0; i < s.n; i++ {
				seq = append(seq, op{kind: opByte, lo: s.lo[i], hi: s.hi[i]})
			}
			alts = append(alts, seq)
		}
	default:
		alts = [][]op{c.elems(nil, n)}
	}
	if c.err != nil {
		return 0
	}
	pcs := make([]int32, 0, len(alts))
	for _, a := range alts {
		if len(g.ops)+len(a)+1 > maxOps {
			c.fail("more than %d ops", maxOps)
			return 0
		}
		// g.ops reallocates as append does: the new array is what is allocated
		grow := int64(0)
		if need := len(g.ops) + len(a) + 1; need > cap(g.ops) {
			grow = int64(max(need, 2*cap(g.ops))) * opBytes
		}
		if !c.charge(int64(len(a)+1), 4+grow) {
			return 0
		}
		pcs = append(pcs, int32(len(g.ops)))
		g.ops = append(g.ops, a...)
		g.ops = append(g.ops, op{kind: opEnd})
	}
	g.rules[id] = pcs
	return id
}

// appendAlts adds n's alternatives (flattening nested Alts used only here).
func (c *compiler) appendAlts(alts [][]op, n *node) [][]op {
	if n.kind == kindAlt && c.refs[n] == 1 {
		for _, k := range n.kids {
			alts = c.appendAlts(alts, k)
		}
		return alts
	}
	if n.kind == kindNever {
		return alts
	}
	if !c.charge(1, sliceHeaderBytes) {
		return alts
	}
	return append(alts, c.elems(nil, n))
}

// elems appends the ops that match n inside one alternative.
func (c *compiler) elems(seq []op, n *node) []op {
	if c.err != nil {
		return seq
	}
	switch n.kind {
	case kindLiteral:
		// the alternative's ops, twice over for its growth by doubling
		if !c.charge(int64(len(n.lit)), 2*opBytes*int64(len(n.lit))) {
			return seq
		}
		for _, b := range n.lit {
			seq = append(seq, op{kind: opByte, lo: b, hi: b})
		}
	case kindSeq:
		for _, k := range n.kids {
			if k.kind == kindSeq && c.refs[k] > 1 {
				// shared: one rule, so a DAG of Seqs does not blow up when inlined
				seq = append(seq, op{kind: opCall, arg: c.compileRule(k)})
				continue
			}
			seq = c.elems(seq, k)
		}
	case kindRepeat:
		r := c.compileRule(n.kids[0])
		seq = append(seq, op{kind: opRepeat, arg: r, min: int32(clampInt(n.min)), max: int32(clampInt(n.max))})
	case kindUntil:
		if !c.charge(int64(len(n.stop)), 2*opBytes+untilBytes+9*int64(len(n.stop))) {
			return seq
		}
		seq = append(seq, op{kind: opUntil, arg: int32(len(c.g.untils))})
		c.g.untils = append(c.g.untils, newUntil(n.stop, n.max))
	default:
		seq = append(seq, op{kind: opCall, arg: c.compileRule(n)})
	}
	return seq
}

func clampInt(v int) int {
	const lim = 1 << 30
	if v > lim {
		return lim
	}
	return v
}

func newUntil(stop []byte, maxText int) until {
	u := until{stop: stop, maxText: int32(clampInt(maxText)), fail: make([]int32, len(stop)+1), chars: make([]int32, len(stop)+1)}
	if maxText < 0 {
		u.maxText = -1
	}
	// fail[j]: the longest proper prefix of stop[:j] that is also its suffix.
	k := int32(0)
	for j := 1; j < len(stop); j++ {
		for k > 0 && stop[j] != stop[k] {
			k = u.fail[k]
		}
		if stop[j] == stop[k] {
			k++
		}
		u.fail[j+1] = k
	}
	// Characters are counted at their lead byte, so a partial character counts as one.
	for j := 1; j <= len(stop); j++ {
		u.chars[j] = u.chars[j-1]
		if !utf8.RuneStart(stop[j-1]) {
			continue
		}
		u.chars[j]++
	}
	return u
}

// step advances the KMP match length j by byte b.
func (u *until) step(j int32, b byte) int32 {
	for {
		if int(j) < len(u.stop) && u.stop[j] == b {
			return j + 1
		}
		if j == 0 {
			return 0
		}
		j = u.fail[j]
	}
}

// check runs the static analyses: nullable rules, productive rules (unproductive alternatives
// are dropped, so every live matcher state can still complete), Repeat items that can match
// the empty string, and left recursion (which would make closure loop).
func (g *Grammar) check(b *budget) error {
	nr := len(g.rules)
	// nullable, productive, first's headers and color
	if err := b.spend(int64(nr), int64(nr)*(3+sliceHeaderBytes)); err != nil {
		return err
	}
	nullable := make([]bool, nr)
	productive := make([]bool, nr)
	// steps counts the ops the analyses scan: the fixpoint below makes a pass per level of
	// a chain of rules, so its work is not linear in the grammar's size.
	var steps int64
	altNullable := func(pc int32) bool {
		for ; g.ops[pc].kind != opEnd; pc++ {
			steps++
			o := g.ops[pc]
			switch o.kind {
			case opCall:
				if !nullable[o.arg] {
					return false
				}
			case opRepeat:
				if o.min > 0 && !nullable[o.arg] {
					return false
				}
			default:
				return false
			}
		}
		return true
	}
	altProductive := func(pc int32) bool {
		for ; g.ops[pc].kind != opEnd; pc++ {
			steps++
			o := g.ops[pc]
			switch o.kind {
			case opCall:
				if !productive[o.arg] {
					return false
				}
			case opRepeat:
				if o.min > 0 && !productive[o.arg] {
					return false
				}
			}
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for r, pcs := range g.rules {
			for _, pc := range pcs {
				if !nullable[r] && altNullable(pc) {
					nullable[r], changed = true, true
				}
				if !productive[r] && altProductive(pc) {
					productive[r], changed = true, true
				}
			}
		}
		if err := b.step(steps); err != nil {
			return err
		}
		steps = 0
	}
	if !productive[g.start] {
		return fmt.Errorf("%w: the grammar matches nothing", ErrGrammar)
	}
	for r, pcs := range g.rules {
		kept := pcs[:0]
		for _, pc := range pcs {
			if altProductive(pc) {
				kept = append(kept, pc)
			}
		}
		g.rules[r] = kept
	}
	for _, o := range g.ops {
		if o.kind == opRepeat && nullable[o.arg] {
			return fmt.Errorf("%w: a Repeat item can match the empty string", ErrGrammar)
		}
	}
	if err := b.step(int64(len(g.ops))); err != nil {
		return err
	}
	// Left recursion: rule r reaches rule s without consuming a byte.
	first := make([][]int32, nr)
	for r, pcs := range g.rules {
		for _, pc := range pcs {
			for ; g.ops[pc].kind == opCall || g.ops[pc].kind == opRepeat; pc++ {
				first[r] = append(first[r], g.ops[pc].arg)
				if !nullable[g.ops[pc].arg] && !(g.ops[pc].kind == opRepeat && g.ops[pc].min == 0) {
					break
				}
			}
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, nr)
	type item struct{ r, i int32 }
	for s := range nr {
		if color[s] != white {
			continue
		}
		stack := []item{{int32(s), 0}}
		color[s] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if int(top.i) == len(first[top.r]) {
				color[top.r] = black
				stack = stack[:len(stack)-1]
				continue
			}
			next := first[top.r][top.i]
			top.i++
			switch color[next] {
			case grey:
				return fmt.Errorf("%w: left recursion (a rule can reach itself without consuming input)", ErrGrammar)
			case white:
				color[next] = grey
				stack = append(stack, item{next, 0})
			}
		}
	}
	return nil
}

// computeClasses partitions the bytes into classes that no op tells apart. Every op tests a
// byte against intervals (byte ranges; UTF-8 roles and single stop bytes for Until), so the
// classes are the runs between interval boundaries.
func (g *Grammar) computeClasses() {
	var cut [257]bool
	mark := func(lo, hi int) { cut[lo], cut[hi+1] = true, true }
	for _, o := range g.ops {
		if o.kind == opByte {
			mark(int(o.lo), int(o.hi))
		}
	}
	if len(g.untils) > 0 {
		for b := 1; b < 256; b++ {
			if utf8Category(byte(b)) != utf8Category(byte(b-1)) {
				cut[b] = true
			}
		}
		for _, u := range g.untils {
			for _, s := range u.stop {
				mark(int(s), int(s))
			}
		}
	}
	id := -1
	for b := range 256 {
		if b == 0 || cut[b] {
			id++
			g.classRep = append(g.classRep, byte(b))
		}
		g.classOf[b] = uint8(id)
	}
	g.nClasses = id + 1
}

// utf8Category names the role of a byte in UTF-8 (what the Until validator distinguishes).
func utf8Category(b byte) byte {
	switch {
	case b < 0x80:
		return 'a'
	case b < 0x90:
		return 'b'
	case b < 0xA0:
		return 'c'
	case b < 0xC0:
		return 'd'
	case b < 0xC2:
		return 'e'
	case b < 0xE0:
		return 'f'
	case b == 0xE0:
		return 'g'
	case b == 0xED:
		return 'h'
	case b < 0xF0:
		return 'i'
	case b == 0xF0:
		return 'j'
	case b < 0xF4:
		return 'k'
	case b == 0xF4:
		return 'l'
	}
	return 'm'
}
