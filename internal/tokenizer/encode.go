package tokenizer

import (
	"math"
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
	out, _ := t.encode(text, addSpecial, parseSpecial, math.MaxInt)
	return out
}

// encode is Encode and EncodeLimit: the tokens and true when there are at
// most limit of them, else nil and false as soon as that is known. Before
// each raw fragment (SPM) or word (byte-level BPE) is merged, the bound of
// MaxTokenBytes says whether it could still fit: a word of w bytes is at
// least ⌈w/MaxTokenBytes⌉ tokens, so a huge word past the budget is refused
// without merging it (and the whole text, first, before partitioning it).
func (t *Tokenizer) encode(text string, addSpecial, parseSpecial bool, limit int) ([]int32, bool) {
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
	var m merger
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
// character); merge refuses a text of 2 GiB or more.
type symbol struct {
	prev, next int32 // -1 at either end
	start, n   int32 // byte range in the text
}

// maxMergeBytes is the longest text merge takes: its offsets must fit a symbol's int32.
const maxMergeBytes = math.MaxInt32

// bigram is a candidate merge of the live symbol left with the one after it, which
// together had size bytes when it was queued. key orders the queue: the lowest first
// (byte-level BPE: the merge rank; SPM: the negated score), ties to the leftmost.
//
// A queued bigram is current exactly when left is live and its length plus its right
// neighbour's is still size: a symbol only grows (by taking in its right neighbour) and
// only dies (taken in by its left one), so any merge that touched either side since the
// bigram was queued made that sum larger or killed left. No text is kept per entry.
type bigram struct {
	key        uint32
	left, size int32
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

// mergeQueue is a binary min-heap of bigrams on (key, left), written out rather than
// through container/heap, whose interface boxes every pushed value (an allocation each).
type mergeQueue []bigram

func (q mergeQueue) less(i, j int) bool {
	if q[i].key != q[j].key {
		return q[i].key < q[j].key
	}
	return q[i].left < q[j].left
}

func (q *mergeQueue) push(b bigram) {
	*q = append(*q, b)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// init orders a queue filled without push, in linear time.
func (q mergeQueue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q mergeQueue) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

func (q *mergeQueue) pop() bigram {
	h := *q
	b := h[0]
	n := len(h) - 1
	h[0] = h[n]
	*q = h[:n]
	q.down(0)
	return b
}

// merger holds the buffers of one Encode call, reused from word to word so that a text of
// many short words costs no allocation per word. Not safe for concurrent use.
type merger struct {
	syms  []symbol
	queue mergeQueue
	word  []byte // mergeWord: the word's byte-level form
}

// split fills m.syms with one symbol per character of text (a lead byte and the
// continuation bytes it announces) and empties the queue.
func (m *merger) split(text string) {
	m.syms = m.syms[:0]
	m.queue = m.queue[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		next := int32(len(m.syms) + 1)
		if off+n == len(text) {
			next = -1
		}
		m.syms = append(m.syms, symbol{prev: int32(len(m.syms) - 1), next: next, start: int32(off), n: int32(n)})
		off += n
	}
}

// merge runs the queue to the end: pop the best bigram, skip it when stale, else join its
// two symbols and queue the new symbol's bigrams with its neighbours. rank returns the key
// of the pair (left, right) and whether it is a candidate at all. Each join queues at
// most two bigrams, so the queue never holds more than 3× the characters, and the work is
// O(n log n) for n characters whatever they are.
// REQUIRES: m.split(text) and the initial bigrams queued (m.queue.init after appends).
func (m *merger) merge(text string, rank func(left, right int32) (uint32, bool)) {
	add := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		if key, ok := rank(left, right); ok {
			m.queue.push(bigram{key: key, left: left, size: m.syms[left].n + m.syms[right].n})
		}
	}
	for len(m.queue) > 0 {
		b := m.queue.pop()
		l := &m.syms[b.left]
		if l.n == 0 || l.next < 0 {
			continue
		}
		right := l.next
		r := &m.syms[right]
		if l.n+r.n != b.size {
			continue // stale: one side changed since it was queued
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			m.syms[r.next].prev = b.left
		}
		add(l.prev, b.left)
		add(b.left, l.next)
	}
}

// queueInitial queues the bigram of every adjacent pair of the fresh split, ordered in
// linear time.
func (m *merger) queueInitial(rank func(left, right int32) (uint32, bool)) {
	for i := int32(1); i < int32(len(m.syms)); i++ {
		if key, ok := rank(i-1, i); ok {
			m.queue = append(m.queue, bigram{key: key, left: i - 1, size: m.syms[i-1].n + m.syms[i].n})
		}
	}
	m.queue.init()
}

func (m *merger) symText(text string, i int32) string {
	s := m.syms[i]
	return text[s.start : s.start+s.n]
}

// --- SentencePiece -------------------------------------------------------

type spmSession struct {
	t        *Tokenizer
	m        *merger
	text     string
	revMerge map[string][2]int32 // merged text -> the symbols it came from (last writer wins)
}

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
	s := spmSession{t: t, m: m, text: text, revMerge: map[string][2]int32{}}
	m.split(text)
	// The queue pops the highest score first: its key is the score's order reversed.
	rank := func(left, right int32) (uint32, bool) {
		l, r := m.syms[left], m.syms[right]
		piece := text[l.start : l.start+l.n+r.n]
		id, ok := t.toID[piece]
		if !ok {
			return 0, false
		}
		s.revMerge[piece] = [2]int32{left, right}
		return ^scoreOrder(t.scores[id]), true
	}
	m.queueInitial(rank)
	m.merge(text, rank)
	for i := int32(0); i != -1; i = m.syms[i].next {
		out = s.resegment(i, out, 0)
	}
	return out
}

// maxResegmentDepth bounds the recursion llama.cpp leaves unbounded; it is
// deeper than any real merge tree (each level at least halves nothing, but
// tokens are short) and only guards pathological vocabularies.
const maxResegmentDepth = 64

func (s *spmSession) resegment(i int32, out []int32, depth int) []int32 {
	text := s.m.symText(s.text, i)
	if id, ok := s.t.toID[text]; ok {
		return append(out, id)
	}
	if p, ok := s.revMerge[text]; ok && depth < maxResegmentDepth {
		out = s.resegment(p[0], out, depth+1)
		return s.resegment(p[1], out, depth+1)
	}
	for j := 0; j < len(text); j++ {
		out = s.t.appendByteToken(text[j], out)
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
	m.word = appendWordBytes(m.word[:0], raw)
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
	m.split(word)
	rank := func(left, right int32) (uint32, bool) {
		rank, ok := t.ranks[mergePair{m.symText(word, left), m.symText(word, right)}]
		return uint32(rank), ok // ranks are merge-list indexes, never negative
	}
	m.queueInitial(rank)
	m.merge(word, rank)
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
