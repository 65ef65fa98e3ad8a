package grammar

import (
	"encoding/binary"
	"slices"
	"sync"
)

// A matcher position is a set of stacks (the grammar may be ambiguous for a while: anyOf
// branches, number forms). A stack is a list of frames, top first; the top frame is always a
// terminal op (closure has expanded calls and repeats), the others are return points. Stacks
// are interned as linked nodes (frame, parent) so equal stacks share an id; stack 0 is the
// empty stack, meaning the grammar has ended. Sets of stacks are interned as states, and the
// table is a lazily built DFA: next[state*nClasses+class] is the state after one byte, built
// the first time it is needed. A mask is a scan of the vocabulary trie through that DFA, and
// masks are memoized by the state with its counters clamped (see memoKey).

type frame struct {
	pc  int32
	n   int32 // opRepeat: iterations done; opUntil: characters consumed
	aux int32 // opUntil: KMP match length | UTF-8 decoder state << 24 | auxFree; opRepeat: auxFree, auxNoExit
}

// Flags of frames in scan states (see table.scanState): the counter is so far from its bound
// that no token can reach it, so the frame behaves as if there were none.
const (
	auxFree   = 1 << 30 // opRepeat: no maximum; opUntil: no limit on the text
	auxNoExit = 1 << 29 // opRepeat: the minimum is out of reach: no exit
	auxUTF8   = 0x7 << 24
	auxKMP    = 0xFFFFFF
)

type stackKey struct {
	f      frame
	parent int32
}

type state struct {
	stacks   []int32 // sorted stack ids
	complete bool    // holds the empty stack
	done     bool    // holds only the empty stack
	memo     int32   // index into table.masks, -1 unknown
	memoGen  uint32

	scan       int32 // scanState(this), 0 unknown
	text       int8  // isTextState: 0 unknown, 1 yes, -1 no
	loopsKnown bool
	loops      uint64 // byte groups whose every byte leads from this state back to itself
}

const (
	unknownState = 0 // in next: not built yet
	deadState    = 1 // no stacks
)

// Memo limits: a mask is Size/8 bytes (19 KB for a 152K vocabulary).
const maxMemoBytes = 64 << 20

// table is the DFA and mask memo for one (Grammar, Vocab). All fields are protected by mu.
type table struct {
	mu sync.Mutex
	g  *Grammar
	v  *Vocab

	frames  []frame // stack id -> top frame
	parents []int32 // stack id -> rest of the stack
	stackID map[stackKey]int32

	states  []state
	stateID map[string]int32
	next    []int32
	start   int32

	masks     [][]uint64
	memoIndex map[string]int32
	memoGen   uint32
	memoBytes int

	// scratch
	seen    []uint32 // stack id -> stamp
	stamp   uint32
	out     []int32
	visited map[stackKey]struct{}
	key     []byte
	walk    []int32
	short   []uint64 // FillMask into a mask shorter than the vocabulary
}

// maxTableStates bounds a shared table: a grammar kept for many requests (json_object, a
// cached schema) would otherwise collect every state any of them reached. Past it, new
// matchers start a fresh table; matchers already running keep theirs.
const maxTableStates = 1 << 17

func (g *Grammar) table(v *Vocab) *table {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.tables[v]; ok {
		t.mu.Lock()
		full := len(t.states) > maxTableStates
		t.mu.Unlock()
		if !full {
			return t
		}
	}
	t := &table{
		g: g, v: v,
		frames: []frame{{}}, parents: []int32{0}, stackID: map[stackKey]int32{},
		states: make([]state, 2), stateID: map[string]int32{}, next: make([]int32, 2*g.nClasses),
		memoIndex: map[string]int32{}, visited: map[stackKey]struct{}{}, seen: []uint32{0},
		walk: make([]int32, v.maxLen+2),
	}
	t.states[deadState] = state{memo: -1}
	for c := range g.nClasses {
		t.next[deadState*g.nClasses+c] = deadState
	}
	t.out = t.out[:0]
	t.stamp++
	for _, pc := range g.rules[g.start] {
		t.expand(frame{pc: pc}, 0)
	}
	t.start = t.intern()
	g.tables[v] = t
	return t
}

// push interns the stack (f, parent).
func (t *table) push(f frame, parent int32) int32 {
	k := stackKey{f, parent}
	if id, ok := t.stackID[k]; ok {
		return id
	}
	id := int32(len(t.frames))
	t.frames = append(t.frames, f)
	t.parents = append(t.parents, parent)
	t.seen = append(t.seen, 0)
	t.stackID[k] = id
	return id
}

// emit adds stack s to t.out once per stamp.
func (t *table) emit(s int32) {
	if t.seen[s] != t.stamp {
		t.seen[s] = t.stamp
		t.out = append(t.out, s)
	}
}

// expand adds to t.out every stack with a terminal on top that (f, parent) reaches without
// consuming a byte. Check rules out left recursion and nullable Repeat items, so it ends;
// visited cuts the repeated work of shared paths.
func (t *table) expand(f frame, parent int32) {
	g := t.g
	o := &g.ops[f.pc]
	switch o.kind {
	case opByte, opUntil:
		t.emit(t.push(f, parent))
		return
	case opEnd:
		if parent == 0 {
			t.emit(0)
			return
		}
		t.expand(t.frames[parent], t.parents[parent])
		return
	}
	k := stackKey{f, parent}
	if _, ok := t.visited[k]; ok {
		return
	}
	t.visited[k] = struct{}{}
	switch o.kind {
	case opCall:
		np := parent
		if g.ops[f.pc+1].kind != opEnd {
			np = t.push(frame{pc: f.pc + 1}, parent)
		}
		for _, pc := range g.rules[o.arg] {
			t.expand(frame{pc: pc}, np)
		}
	case opRepeat:
		n := f.n
		unbounded := o.max < 0 || f.aux&auxFree != 0
		if unbounded || n < o.max {
			rn := n + 1
			switch {
			case f.aux&auxNoExit != 0:
				rn = n // the count matters no more
			case unbounded && rn > o.min:
				rn = o.min // beyond min an unbounded count no longer matters
			}
			np := t.push(frame{pc: f.pc, n: rn, aux: f.aux}, parent)
			for _, pc := range g.rules[o.arg] {
				t.expand(frame{pc: pc}, np)
			}
		}
		if n >= o.min && f.aux&auxNoExit == 0 {
			t.expand(frame{pc: f.pc + 1}, parent)
		}
	}
}

// advance adds to t.out the stacks that stack s becomes after byte b.
func (t *table) advance(s int32, b byte) {
	if s == 0 {
		return
	}
	f, p := t.frames[s], t.parents[s]
	o := &t.g.ops[f.pc]
	switch o.kind {
	case opByte:
		if b >= o.lo && b <= o.hi {
			t.expand(frame{pc: f.pc + 1}, p)
		}
	case opUntil:
		u := &t.g.untils[o.arg]
		n := f.n
		u0 := (f.aux & auxUTF8) >> 24
		us, ok := utf8Step(u0, b)
		if !ok {
			return
		}
		if u0 == 0 {
			n++ // a lead byte starts a character
		}
		j := u.step(f.aux&auxKMP, b)
		if int(j) == len(u.stop) {
			t.expand(frame{pc: f.pc + 1}, p)
			return
		}
		if u.maxText >= 0 && f.aux&auxFree == 0 {
			if n-u.chars[j] > u.maxText {
				return
			}
		} else {
			n = 0
		}
		t.emit(t.push(frame{pc: f.pc, n: n, aux: j | us<<24 | f.aux&auxFree}, p))
	}
}

// utf8Step is a UTF-8 validator: state 0 expects a lead byte; the others name what the next
// continuation byte must be and what follows it.
func utf8Step(s int32, b byte) (int32, bool) {
	const (
		start = 0
		cont1 = 1 // one more 80..BF
		cont2 = 2 // two more 80..BF
		e0    = 3 // A0..BF then one
		ed    = 4 // 80..9F then one
		cont3 = 5 // three more 80..BF
		f0    = 6 // 90..BF then two
		f4    = 7 // 80..8F then two
	)
	isCont := b >= 0x80 && b <= 0xBF
	switch s {
	case start:
		switch {
		case b < 0x80:
			return start, true
		case b >= 0xC2 && b <= 0xDF:
			return cont1, true
		case b == 0xE0:
			return e0, true
		case b == 0xED:
			return ed, true
		case b >= 0xE1 && b <= 0xEF:
			return cont2, true
		case b == 0xF0:
			return f0, true
		case b >= 0xF1 && b <= 0xF3:
			return cont3, true
		case b == 0xF4:
			return f4, true
		}
		return 0, false
	case cont1:
		return start, isCont
	case cont2:
		return cont1, isCont
	case e0:
		return cont1, b >= 0xA0 && b <= 0xBF
	case ed:
		return cont1, b >= 0x80 && b <= 0x9F
	case cont3:
		return cont2, isCont
	case f0:
		return cont2, b >= 0x90 && b <= 0xBF
	case f4:
		return cont2, b >= 0x80 && b <= 0x8F
	}
	return 0, false
}

// intern turns t.out into a state id (sorting it) and resets the closure scratch.
func (t *table) intern() int32 {
	clear(t.visited)
	if len(t.out) == 0 {
		return deadState
	}
	slices.Sort(t.out)
	t.key = t.key[:0]
	for _, s := range t.out {
		t.key = binary.LittleEndian.AppendUint32(t.key, uint32(s))
	}
	if id, ok := t.stateID[string(t.key)]; ok {
		t.out = t.out[:0]
		return id
	}
	st := state{stacks: slices.Clone(t.out), memo: -1}
	st.complete = st.stacks[0] == 0
	st.done = st.complete && len(st.stacks) == 1
	id := int32(len(t.states))
	t.states = append(t.states, st)
	t.stateID[string(t.key)] = id
	t.next = append(t.next, make([]int32, t.g.nClasses)...)
	if st.done {
		for c := range t.g.nClasses {
			t.next[int(id)*t.g.nClasses+c] = deadState
		}
	}
	t.out = t.out[:0]
	return id
}

// step returns the state after byte b from state s, building it if needed.
func (t *table) step(s int32, b byte) int32 {
	c := int(t.g.classOf[b])
	if x := t.next[int(s)*t.g.nClasses+c]; x != unknownState {
		return x
	}
	return t.build(s, c)
}

func (t *table) build(s int32, c int) int32 {
	t.out = t.out[:0]
	t.stamp++
	if t.stamp == 0 {
		clear(t.seen)
		t.stamp = 1
	}
	b := t.g.classRep[c]
	for _, st := range t.states[s].stacks {
		t.advance(st, b)
	}
	x := t.intern()
	t.next[int(s)*t.g.nClasses+c] = x
	return x
}

// fill writes the mask of state s: a token is allowed if all its bytes lead to a live state.
func (t *table) fill(s int32, mask []uint64) {
	st := &t.states[s]
	if st.memo >= 0 && st.memoGen == t.memoGen {
		copy(mask, t.masks[st.memo])
		return
	}
	key := string(t.memoKey(s)) // a copy: scan reuses t.key
	if i, ok := t.memoIndex[key]; ok {
		st.memo, st.memoGen = i, t.memoGen
		copy(mask, t.masks[i])
		return
	}
	t.scan(s, mask)
	if t.memoBytes+len(mask)*8 > maxMemoBytes {
		t.masks, t.memoIndex, t.memoBytes = nil, map[string]int32{}, 0
		t.memoGen++
	}
	i := int32(len(t.masks))
	t.masks = append(t.masks, slices.Clone(mask))
	t.memoIndex[key] = i
	t.memoBytes += len(mask) * 8
	st = &t.states[s]
	st.memo, st.memoGen = i, t.memoGen
}

// scan walks the trie from state s. REQUIRES: len(mask) == v.MaskWords().
func (t *table) scan(s int32, mask []uint64) {
	clear(mask)
	v := t.v
	if t.states[s].complete {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	if t.states[s].done {
		return
	}
	s = t.scanState(s)
	nodes := v.nodes
	walk := t.walk
	walk[0] = s
	rootLoops := t.loopGroups(s)
	rootText := t.isTextState(s)
	nc := t.g.nClasses
	classOf := &t.g.classOf
	for i := 0; i < len(nodes); {
		nd := &nodes[i]
		from := walk[nd.depth-1]
		c := int(classOf[nd.b])
		x := t.next[int(from)*nc+c]
		if x == unknownState {
			x = t.build(from, c)
		}
		if x == deadState {
			i = int(nd.end)
			continue
		}
		walk[nd.depth] = x
		for tok := nd.tok; tok >= 0; tok = v.same[tok] {
			mask[tok>>6] |= 1 << (uint(tok) & 63)
		}
		// Inside free text most bytes lead back to the same state. When every byte below
		// this node does, every token below is allowed: set them without stepping.
		if (x == from || x == s) && nd.end > int32(i+1) {
			lg := rootLoops
			if x != s {
				lg = t.loopGroups(x)
			}
			sg := v.subGroups[i]
			// Either every byte below loops, or x is s, a state where free text loops
			// (every valid character leads back) and everything below is valid UTF-8.
			if sg&^lg == 0 || (x == s && rootText && sg&validUTF8Below != 0 && sg&^(lg|utf8Groups) == 0) {
				for _, tok := range v.tokOrder[v.tokStart[i+1]:v.tokStart[nd.end]] {
					mask[tok>>6] |= 1 << (uint(tok) & 63)
				}
				i = int(nd.end)
				continue
			}
		}
		i++
	}
}

// loopGroups returns the byte groups whose every byte leads from state s back to s,
// building s's transitions the first time.
func (t *table) loopGroups(s int32) uint64 {
	if !t.states[s].loopsKnown {
		not := uint64(0)
		for b := range 256 {
			if t.step(s, byte(b)) != s {
				not |= 1 << byteGroup[b]
			}
		}
		st := &t.states[s]
		st.loops, st.loopsKnown = ^not, true
	}
	return t.states[s].loops
}

// isTextState reports whether every valid multi-byte UTF-8 character leads from s back to s
// (as inside a JSON string): then a token of plain text and whole or cut-short characters is
// allowed from s whatever its non-ASCII bytes are.
func (t *table) isTextState(s int32) bool {
	st := &t.states[s]
	if st.text != 0 {
		return st.text > 0
	}
	type item struct {
		x    int32
		need int
	}
	ok := true
	seen := map[item]bool{}
	var back func(x int32, need int) bool // every continuation of need bytes from x ends at s
	back = func(x int32, need int) bool {
		if need == 0 {
			return x == s
		}
		if x == deadState {
			return false
		}
		if v, done := seen[item{x, need}]; done {
			return v
		}
		r := true
		for c := 0x80; c <= 0xBF && r; c++ {
			r = back(t.step(x, byte(c)), need-1)
		}
		seen[item{x, need}] = r
		return r
	}
	for lead := 0xC2; lead <= 0xF4 && ok; lead++ {
		x := t.step(s, byte(lead))
		lo, hi, need := 0x80, 0xBF, 1
		switch {
		case lead >= 0xF0:
			need = 3
		case lead >= 0xE0:
			need = 2
		}
		switch lead {
		case 0xE0:
			lo = 0xA0
		case 0xED:
			hi = 0x9F
		case 0xF0:
			lo = 0x90
		case 0xF4:
			hi = 0x8F
		}
		for c := lo; c <= hi && ok; c++ {
			ok = x != deadState && back(t.step(x, byte(c)), need-1)
		}
	}
	st = &t.states[s]
	st.text = -1
	if ok {
		st.text = 1
	}
	return ok
}

// scanState returns the state the trie scan of s starts from: s with every counter that no
// token can bring to its bound marked free (auxFree, auxNoExit). It allows exactly the tokens
// s allows, by the argument of memoKey, and where s counts characters of a bounded string
// it loops on plain text as an unbounded one does, so scan can skip whole subtrees.
func (t *table) scanState(s int32) int32 {
	if x := t.states[s].scan; x != 0 {
		return x
	}
	lim := int32(t.v.maxLen) // a token steps a counter at most this many times
	var frames []frame
	var tops []int32
	for _, id := range t.states[s].stacks {
		frames = frames[:0]
		for ; id != 0; id = t.parents[id] {
			frames = append(frames, t.frames[id])
		}
		parent := int32(0)
		for i := len(frames) - 1; i >= 0; i-- {
			f := frames[i]
			o := &t.g.ops[f.pc]
			switch o.kind {
			case opRepeat:
				if o.max >= 0 && f.aux&auxFree == 0 && o.max-f.n > lim {
					f.aux |= auxFree
					f.n = min(f.n, o.min)
				}
				if (o.max < 0 || f.aux&auxFree != 0) && o.min-f.n > lim {
					f.aux |= auxFree | auxNoExit
					f.n = 0
				}
			case opUntil:
				u := &t.g.untils[o.arg]
				if u.maxText >= 0 && f.aux&auxFree == 0 && u.maxText-(f.n-u.chars[f.aux&auxKMP]) > lim+int32(len(u.stop)) {
					f.aux |= auxFree
					f.n = 0
				}
			}
			parent = t.push(f, parent)
		}
		tops = append(tops, parent)
	}
	slices.Sort(tops)
	t.out = append(t.out[:0], slices.Compact(tops)...)
	x := t.intern()
	t.states[s].scan = x
	return x
}

// memoKey is the state with every counter replaced by how far it is from its bounds, clamped
// at maxLen+1: one token holds at most maxLen bytes, and every Repeat iteration and Until
// character consumes at least one, so states that differ only beyond that distance allow the
// same tokens. This is what makes masks inside a long bounded string hit the memo.
func (t *table) memoKey(s int32) []byte {
	lim := int32(t.v.maxLen + 1)
	clamp := func(x int32) int32 { return max(min(x, lim), -1) }
	t.key = t.key[:0]
	for _, id := range t.states[s].stacks {
		for ; id != 0; id = t.parents[id] {
			f := t.frames[id]
			o := &t.g.ops[f.pc]
			a, b := f.n, f.aux
			switch o.kind {
			case opRepeat:
				a = clamp(max(o.min-f.n, 0))
				b = -1
				if o.max >= 0 {
					b = clamp(o.max - f.n)
				}
			case opUntil:
				u := &t.g.untils[o.arg]
				a = -1
				if u.maxText >= 0 {
					// a partial stop match can turn into text: allow for it
					a = min(max(u.maxText-(f.n-u.chars[f.aux&auxKMP]), -1), lim+int32(len(u.stop)))
				}
			}
			t.key = binary.LittleEndian.AppendUint32(t.key, uint32(f.pc))
			t.key = binary.LittleEndian.AppendUint32(t.key, uint32(a))
			t.key = binary.LittleEndian.AppendUint32(t.key, uint32(b))
		}
		t.key = binary.LittleEndian.AppendUint32(t.key, 0xFFFFFFFF)
	}
	return t.key
}
