package tokenizer

import (
	"math"
	"slices"
	"strings"
	"unsafe"
)

// fragment is a piece of the input after special-token partitioning: either
// raw text (token == NoToken) or one special token.
type fragment struct {
	text  string
	token int32
}

// partition splits text around special-token texts as llama.cpp's
// tokenizer_st_partition does: each special token in turn (longest first)
// is searched for, left to right, in the raw fragments left by the ones
// before it. Control and unknown tokens only match with parseSpecial;
// user-defined tokens always match.
//
// It gives up (nil, false) once more than maxSpecial special-token fragments
// are found: each is a token of the output, and a later token only splits
// raw fragments further, never undoes a match, so the output is then sure to
// be over a budget of maxSpecial tokens. The fragment list is rebuilt only
// for a token that occurs: the work is one search of the text per special
// token plus one copy of the list per token found.
func (t *Tokenizer) partition(text string, parseSpecial bool, maxSpecial int) ([]fragment, bool) {
	if text == "" {
		return nil, true
	}
	frags := []fragment{{text: text, token: NoToken}}
	specials := 0
	for _, id := range t.special {
		if !parseSpecial && t.attrs[id]&(attrControl|attrUnknown) != 0 {
			continue
		}
		st := t.tokens[id]
		first := -1
		for i, f := range frags {
			if f.token == NoToken && strings.Contains(f.text, st) {
				first = i
				break
			}
		}
		if first < 0 {
			continue
		}
		out := make([]fragment, first, len(frags)+2)
		copy(out, frags[:first])
		for _, f := range frags[first:] {
			if f.token != NoToken || !strings.Contains(f.text, st) {
				out = append(out, f)
				continue
			}
			rest := f.text
			for {
				i := strings.Index(rest, st)
				if i < 0 {
					break
				}
				if i > 0 {
					out = append(out, fragment{text: rest[:i], token: NoToken})
				}
				out = append(out, fragment{token: id})
				if specials++; specials > maxSpecial {
					return nil, false
				}
				rest = rest[i+len(st):]
			}
			if rest != "" {
				out = append(out, fragment{text: rest, token: NoToken})
			}
		}
		frags = out
	}
	return frags, true
}

// Encode tokenizes text exactly as llama_tokenize(text, addSpecial,
// parseSpecial): addSpecial adds BOS/EOS where the vocabulary asks for
// them; parseSpecial lets control-token texts in the input become those
// tokens. Invalid UTF-8 is accepted (and treated as llama.cpp treats it).
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	out, _ := t.encode(text, addSpecial, parseSpecial, math.MaxInt, nil)
	return out
}

// encode is Encode and EncodeLimit: the tokens and true when there are at
// most limit of them, else nil and false as soon as that is known. Before
// each raw fragment (SPM) or word (byte-level BPE) is merged, the bound of
// MaxTokenBytes says whether it could still fit: a word of w bytes is at
// least ⌈w/MaxTokenBytes⌉ tokens, so a huge word past the budget is refused
// without merging it (and the whole text, first, before partitioning it).
// stats, when not nil, counts the merges' work (tests).
func (t *Tokenizer) encode(text string, addSpecial, parseSpecial bool, limit int, stats *mergeStats) ([]int32, bool) {
	per, perOK := t.MaxTokenBytes()
	// fits reports whether n tokens, then at least bytes/per more, stay within limit.
	fits := func(n, bytes int) bool {
		if n > limit {
			return false
		}
		return !perOK || (bytes+per-1)/per <= limit-n
	}
	if !fits(0, len(text)) {
		return nil, false
	}
	var out []int32
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	frags, ok := t.partition(text, parseSpecial, limit)
	if !ok {
		return nil, false
	}
	prevSpecial := true // SPM: the first raw fragment gets the space prefix
	m := merger{stats: stats}
	for _, f := range frags {
		switch {
		case f.token != NoToken:
			out = append(out, f.token)
			prevSpecial = true
		case t.kind == KindSPM:
			if !fits(len(out), len(f.text)) {
				return nil, false
			}
			s := f.text
			if t.addSpacePrefix && prevSpecial {
				s = " " + s
			}
			out = m.encodeSPM(t, strings.ReplaceAll(s, " ", "\u2581"), out)
			prevSpecial = false
		case t.kind == KindBPE:
			stopped := false
			t.pre.words(f.text, func(lo, hi int) bool {
				if !fits(len(out), hi-lo) {
					stopped = true
					return false
				}
				out = m.mergeWord(t, f.text[lo:hi], out)
				return true
			})
			if stopped {
				return nil, false
			}
		}
		if len(out) > limit {
			return nil, false
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	if len(out) > limit {
		return nil, false
	}
	return out, true
}

// symbol is a run of bytes of the text being merged, linked to its live
// neighbours. n == 0 marks a symbol merged into its left neighbour. The
// fields are int32 to halve the memory of a long word (one symbol per
// character); run takes no text of 2 GiB or more.
type symbol struct {
	prev, next int32 // -1 at either end
	start, n   int32 // byte range in the text
}

// maxMergeBytes is the longest text run takes: its offsets must fit a symbol's int32.
const maxMergeBytes = math.MaxInt32

// bigram is the pair of the live symbol left and the one after it, queued for merging.
// key orders the queue: the lowest first (byte-level BPE: the merge rank; SPM: the score's
// order reversed), ties to the leftmost.
type bigram struct {
	key  uint32
	left int32
}

// scoreOrder maps a float32 to a uint32 in the same order (for every value but NaN): the
// sign bit flipped for positives, every bit for negatives.
func scoreOrder(f float32) uint32 {
	b := math.Float32bits(f)
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

// merger holds the buffers of one Encode call, reused from word to word so that a text of
// many short words costs no allocation per word. Not safe for concurrent use.
//
// The queue is an indexed binary min-heap on (key, left) holding exactly the current
// pairs that are candidates: at[i] is where symbol i's pair with its right neighbour sits
// in it, or -1. A join updates the pairs it changed in place rather than queueing new ones
// beside stale ones, so the heap never holds more entries than there are characters, and
// the memory of a merge is 28 bytes per character (symbol 16, heap entry 8, index 4),
// allocated once at the exact size. Written out rather than through container/heap, whose
// interface boxes every pushed value (an allocation each).
type merger struct {
	syms  []symbol
	heap  []bigram
	at    []int32
	word  []byte      // mergeWord: the word's byte-level form
	stats *mergeStats // tests only: counts the steps (nil: not counted)

	// What run is merging (a field rather than a closure, which would cost an allocation
	// per word): text, with BPE ranks, or SPM scores when spm is set.
	t        *Tokenizer
	text     string
	spm      bool
	revMerge map[string][2]int32 // SPM: merged text -> the symbols it came from (last writer wins)
}

// rank returns the key of the pair (left, right) and whether it is a merge candidate at
// all. Byte-level BPE: the merge rank of the two symbols' texts. SPM: the score of the
// token their concatenation is, in reverse (the highest score merges first); every
// candidate is recorded in revMerge, as llama.cpp's try_add does.
func (m *merger) rank(left, right int32) (uint32, bool) {
	l, r := m.syms[left], m.syms[right]
	if !m.spm {
		rank, ok := m.t.ranks[mergePair{m.text[l.start : l.start+l.n], m.text[r.start : r.start+r.n]}]
		return uint32(rank), ok // ranks are merge-list indexes, never negative
	}
	piece := m.text[l.start : l.start+l.n+r.n]
	id, ok := m.t.toID[piece]
	if !ok {
		return 0, false
	}
	m.revMerge[piece] = [2]int32{left, right}
	return ^scoreOrder(m.t.scores[id]), true
}

// mergeStats counts a merger's work, for the tests that check it is linear.
type mergeStats struct{ chars, heapOps int }

func (m *merger) less(i, j int) bool {
	if m.heap[i].key != m.heap[j].key {
		return m.heap[i].key < m.heap[j].key
	}
	return m.heap[i].left < m.heap[j].left
}

func (m *merger) swap(i, j int) {
	m.heap[i], m.heap[j] = m.heap[j], m.heap[i]
	m.at[m.heap[i].left] = int32(i)
	m.at[m.heap[j].left] = int32(j)
}

func (m *merger) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !m.less(i, p) {
			return
		}
		m.swap(i, p)
		i = p
	}
}

func (m *merger) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(m.heap) {
			return
		}
		c := l
		if r := l + 1; r < len(m.heap) && m.less(r, l) {
			c = r
		}
		if !m.less(c, i) {
			return
		}
		m.swap(i, c)
		i = c
	}
}

// remove takes symbol left's pair out of the heap, if it is there.
func (m *merger) remove(left int32) {
	i := int(m.at[left])
	if i < 0 {
		return
	}
	if m.stats != nil {
		m.stats.heapOps++
	}
	m.at[left] = -1
	last := len(m.heap) - 1
	if i != last {
		m.heap[i] = m.heap[last]
		m.at[m.heap[i].left] = int32(i)
	}
	m.heap = m.heap[:last]
	if i != last {
		m.down(i)
		m.up(i)
	}
}

// set queues, re-keys or removes symbol left's pair with its right neighbour, whichever
// the pair now is.
func (m *merger) set(left int32) {
	if left < 0 {
		return
	}
	right := m.syms[left].next
	key, ok := uint32(0), false
	if right >= 0 {
		key, ok = m.rank(left, right)
	}
	if !ok {
		m.remove(left)
		return
	}
	if m.stats != nil {
		m.stats.heapOps++
	}
	if i := int(m.at[left]); i >= 0 {
		m.heap[i].key = key
		m.down(i)
		m.up(i)
		return
	}
	m.at[left] = int32(len(m.heap))
	m.heap = append(m.heap, bigram{key: key, left: left})
	m.up(len(m.heap) - 1)
}

// run splits text into characters (a lead byte and the continuation bytes it announces),
// queues every adjacent pair rank accepts, and merges to the end: take the best pair, join
// its right symbol into its left, and re-queue the pairs the join changed. rank is called
// for the initial pairs left to right, then after each join for (prev, joined) and
// (joined, next), the order llama.cpp's try_add calls come in. Each join takes at most three heap updates,
// so n characters cost O(n log n) time and 28n bytes, whatever they are.
// REQUIRES: len(text) <= maxMergeBytes.
func (m *merger) run(t *Tokenizer, text string, spm bool) {
	n := 0
	for off := 0; off < len(text); n++ {
		off += utf8Len(text[off])
	}
	if cap(m.syms) < n {
		m.syms = make([]symbol, 0, n)
		m.heap = make([]bigram, 0, n)
		m.at = make([]int32, 0, n)
	}
	m.syms, m.heap, m.at = m.syms[:0], m.heap[:0], m.at[:n]
	m.t, m.text, m.spm = t, text, spm
	for off := 0; off < len(text); {
		w := min(utf8Len(text[off]), len(text)-off)
		next := int32(len(m.syms) + 1)
		if off+w == len(text) {
			next = -1
		}
		m.syms = append(m.syms, symbol{prev: int32(len(m.syms) - 1), next: next, start: int32(off), n: int32(w)})
		off += w
	}
	if m.stats != nil {
		m.stats.chars += n
	}
	// The initial pairs, in order, then heapified in linear time.
	for i := range m.at {
		m.at[i] = -1
	}
	for i := int32(1); i < int32(n); i++ {
		if key, ok := m.rank(i-1, i); ok {
			m.at[i-1] = int32(len(m.heap))
			m.heap = append(m.heap, bigram{key: key, left: i - 1})
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	for len(m.heap) > 0 {
		left := m.heap[0].left
		m.remove(left)
		l := &m.syms[left]
		right := l.next
		r := &m.syms[right]
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			m.syms[r.next].prev = left
		}
		m.remove(right)
		m.set(l.prev)
		m.set(left)
	}
	m.t, m.text = nil, ""
}

func (m *merger) symText(text string, i int32) string {
	s := m.syms[i]
	return text[s.start : s.start+s.n]
}

// --- SentencePiece -------------------------------------------------------

// encodeSPM runs llama.cpp's SPM merge: start from UTF-8 characters, merge
// the adjacent pair whose concatenation is the highest-scoring token until
// none is, then emit each symbol's token, or its bytes as <0xXX> tokens.
func (m *merger) encodeSPM(t *Tokenizer, text string, out []int32) []int32 {
	if len(text) == 0 {
		return out
	}
	if len(text) > maxMergeBytes {
		for i := 0; i < len(text); i++ {
			out = t.appendByteToken(text[i], out)
		}
		return out
	}
	if m.revMerge == nil {
		m.revMerge = map[string][2]int32{}
	}
	clear(m.revMerge)
	m.run(t, text, true)
	for i := int32(0); i != -1; i = m.syms[i].next {
		out = m.resegment(t, text, i, out, 0)
	}
	return out
}

// maxResegmentDepth bounds the recursion llama.cpp leaves unbounded; it is
// deeper than any real merge tree (each level at least halves nothing, but
// tokens are short) and only guards pathological vocabularies.
const maxResegmentDepth = 64

func (m *merger) resegment(t *Tokenizer, whole string, i int32, out []int32, depth int) []int32 {
	text := m.symText(whole, i)
	if id, ok := t.toID[text]; ok {
		return append(out, id)
	}
	if p, ok := m.revMerge[text]; ok && depth < maxResegmentDepth {
		out = m.resegment(t, whole, p[0], out, depth+1)
		return m.resegment(t, whole, p[1], out, depth+1)
	}
	for j := 0; j < len(text); j++ {
		out = t.appendByteToken(text[j], out)
	}
	return out
}

const hexDigits = "0123456789ABCDEF"

// appendByteToken is llama.cpp's byte_to_token for SPM: <0xXX>, else the
// byte as a one-byte token. llama.cpp throws when neither exists; we emit
// UNK, or nothing when there is no UNK either.
func (t *Tokenizer) appendByteToken(b byte, out []int32) []int32 {
	name := string([]byte{'<', '0', 'x', hexDigits[b>>4], hexDigits[b&15], '>'})
	if id, ok := t.toID[name]; ok {
		return append(out, id)
	}
	if id, ok := t.toID[string([]byte{b})]; ok {
		return append(out, id)
	}
	if t.unk != NoToken {
		return append(out, t.unk)
	}
	return out
}

// --- byte-level BPE ----------------------------------------------------

// mergeWord maps the word's bytes to printable codepoints and merges them by
// rank. A final symbol that is not a token falls back to its single bytes,
// and a byte that is not a token is dropped (as llama.cpp does).
func (m *merger) mergeWord(t *Tokenizer, raw string, out []int32) []int32 {
	m.word = appendWordBytes(slices.Grow(m.word[:0], 2*len(raw)), raw) // 2: most bytes map to 2-byte characters
	// word is a view of m.word, which nothing writes until the next call: the map lookups
	// below need strings, and a copy per word would be an allocation per word. No string
	// derived from it outlives this call (only ids are returned).
	word := unsafe.String(unsafe.SliceData(m.word), len(m.word))
	if t.ignoreMerges {
		if id, ok := t.toID[word]; ok {
			return append(out, id)
		}
	}
	if len(word) > maxMergeBytes {
		return t.appendWordBytesTokens(word, out)
	}
	m.run(t, word, false)
	for i := int32(0); i != -1; i = m.syms[i].next {
		str := m.symText(word, i)
		if id, ok := t.toID[str]; ok {
			out = append(out, id)
			continue
		}
		out = t.appendWordBytesTokens(str, out)
	}
	return out
}

// appendWordBytesTokens is byte-level BPE's fallback: each byte of str as its one-byte
// token, dropped when it has none.
func (t *Tokenizer) appendWordBytesTokens(str string, out []int32) []int32 {
	for j := 0; j < len(str); j++ {
		if id, ok := t.toID[str[j:j+1]]; ok {
			out = append(out, id)
		}
	}
	return out
}
