package tokenizer

import (
	"container/heap"
	"strings"
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
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, token: NoToken}}
	for _, id := range t.special {
		if !parseSpecial && t.attrs[id]&(attrControl|attrUnknown) != 0 {
			continue
		}
		st := t.tokens[id]
		var out []fragment
		changed := false
		for _, f := range frags {
			if f.token != NoToken || !strings.Contains(f.text, st) {
				out = append(out, f)
				continue
			}
			changed = true
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
				rest = rest[i+len(st):]
			}
			if rest != "" {
				out = append(out, fragment{text: rest, token: NoToken})
			}
		}
		if changed {
			frags = out
		}
	}
	return frags
}

// Encode tokenizes text exactly as llama_tokenize(text, addSpecial,
// parseSpecial): addSpecial adds BOS/EOS where the vocabulary asks for
// them; parseSpecial lets control-token texts in the input become those
// tokens. Invalid UTF-8 is accepted (and treated as llama.cpp treats it).
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var out []int32
	frags := t.partition(text, parseSpecial)
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	switch t.kind {
	case KindSPM:
		prevSpecial := true // the first raw fragment gets the space prefix
		for _, f := range frags {
			if f.token != NoToken {
				out = append(out, f.token)
				prevSpecial = true
				continue
			}
			s := f.text
			if t.addSpacePrefix && prevSpecial {
				s = " " + s
			}
			out = t.encodeSPM(strings.ReplaceAll(s, " ", "\u2581"), out)
			prevSpecial = false
		}
	case KindBPE:
		for _, f := range frags {
			if f.token != NoToken {
				out = append(out, f.token)
				continue
			}
			out = t.encodeBPE(f.text, out)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// symbol is a run of bytes of the text being merged, linked to its live
// neighbours. n == 0 marks a symbol merged into its left neighbour.
type symbol struct {
	prev, next int // -1 at either end
	start, n   int // byte range in the text
}

func splitSymbols(text string) []symbol {
	syms := make([]symbol, 0, len(text))
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		next := len(syms) + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, symbol{prev: len(syms) - 1, next: next, start: off, n: n})
		off += n
	}
	return syms
}

// --- SentencePiece -------------------------------------------------------

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmQueue pops the highest score first, then the leftmost.
type spmQueue []spmBigram

func (q spmQueue) Len() int { return len(q) }
func (q spmQueue) Less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}
func (q spmQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *spmQueue) Push(x any)   { *q = append(*q, x.(spmBigram)) }
func (q *spmQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

type spmSession struct {
	t        *Tokenizer
	text     string
	syms     []symbol
	queue    spmQueue
	revMerge map[string][2]int // merged text -> the symbols it came from (last writer wins)
}

// encodeSPM runs llama.cpp's SPM merge: start from UTF-8 characters, merge
// the adjacent pair whose concatenation is the highest-scoring token until
// none is, then emit each symbol's token, or its bytes as <0xXX> tokens.
func (t *Tokenizer) encodeSPM(text string, out []int32) []int32 {
	s := spmSession{t: t, text: text, syms: splitSymbols(text), revMerge: map[string][2]int{}}
	for i := 1; i < len(s.syms); i++ {
		s.tryAdd(i-1, i)
	}
	for s.queue.Len() > 0 {
		b := heap.Pop(&s.queue).(spmBigram)
		l, r := &s.syms[b.left], &s.syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale: one side already merged elsewhere
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			s.syms[r.next].prev = b.left
		}
		s.tryAdd(l.prev, b.left)
		s.tryAdd(b.left, l.next)
	}
	if len(s.syms) == 0 {
		return out
	}
	for i := 0; i != -1; i = s.syms[i].next {
		out = s.resegment(i, out, 0)
	}
	return out
}

func (s *spmSession) symText(i int) string {
	return s.text[s.syms[i].start : s.syms[i].start+s.syms[i].n]
}

func (s *spmSession) tryAdd(left, right int) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.syms[left], s.syms[right]
	text := s.text[l.start : l.start+l.n+r.n]
	id, ok := s.t.toID[text]
	if !ok {
		return
	}
	heap.Push(&s.queue, spmBigram{left: left, right: right, score: s.t.scores[id], size: len(text)})
	s.revMerge[text] = [2]int{left, right}
}

// maxResegmentDepth bounds the recursion llama.cpp leaves unbounded; it is
// deeper than any real merge tree (each level at least halves nothing, but
// tokens are short) and only guards pathological vocabularies.
const maxResegmentDepth = 64

func (s *spmSession) resegment(i int, out []int32, depth int) []int32 {
	text := s.symText(i)
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

type bpeBigram struct {
	left, right int
	text        string
	rank        int32
}

// bpeQueue pops the lowest rank first, then the leftmost.
type bpeQueue []bpeBigram

func (q bpeQueue) Len() int { return len(q) }
func (q bpeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].left < q[j].left
}
func (q bpeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bpeQueue) Push(x any)   { *q = append(*q, x.(bpeBigram)) }
func (q *bpeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// encodeBPE pre-tokenizes text into words, maps each word's bytes to
// printable codepoints, and merges inside each word by rank. A final symbol
// that is not a token falls back to its single bytes, and a byte that is
// not a token is dropped (as llama.cpp does).
func (t *Tokenizer) encodeBPE(text string, out []int32) []int32 {
	cpts := decodeCodepoints(text)
	for _, w := range t.pre.preSplit(cpts) {
		word := byteEncodeWord(cpts[w.lo:w.hi])
		out = t.mergeWord(word, out)
	}
	return out
}

func (t *Tokenizer) mergeWord(word string, out []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.toID[word]; ok {
			return append(out, id)
		}
	}
	syms := splitSymbols(word)
	var q bpeQueue
	add := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left], syms[right]
		ls, rs := word[l.start:l.start+l.n], word[r.start:r.start+r.n]
		rank, ok := t.ranks[mergePair{ls, rs}]
		if !ok {
			return
		}
		heap.Push(&q, bpeBigram{left: left, right: right, text: word[l.start : l.start+l.n+r.n], rank: rank})
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(&q).(bpeBigram)
		l, r := &syms[b.left], &syms[b.right]
		// Symbols are contiguous, so the pair is current exactly when the
		// two live symbols still span b.text.
		if l.n == 0 || r.n == 0 || l.n+r.n != len(b.text) || r.start != l.start+l.n {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		add(l.prev, b.left)
		add(b.left, l.next)
	}
	for _, s := range syms {
		if s.n == 0 {
			continue
		}
		str := word[s.start : s.start+s.n]
		if id, ok := t.toID[str]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(str); j++ {
			if id, ok := t.toID[str[j:j+1]]; ok {
				out = append(out, id)
			}
		}
	}
	return out
}
