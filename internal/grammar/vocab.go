package grammar

import (
	"bytes"
	"sort"
)

// Vocab is a model's vocabulary prepared for masking: a byte trie of every usable token, laid
// out flat in preorder so that a mask is one forward scan that skips dead subtrees. It is
// immutable and safe for concurrent use; build it once per model.
type Vocab struct {
	n      int
	tokens [][]byte
	ok     []bool // token may be generated as text (allowed, non-empty, not an end token)
	eos    []int32
	isEOS  []bool
	nodes  []trieNode
	same   []int32 // same[t]: another token with t's bytes, or -1
	maxLen int     // longest token, in bytes

	// For skipping whole subtrees (see table.scan): subGroups[i] is the set of byte groups
	// that occur below node i; the tokens at nodes i..j-1 are tokOrder[tokStart[i]:tokStart[j]].
	subGroups []uint64
	tokOrder  []int32
	tokStart  []int32
}

// trieNode is one byte of the trie. Its subtree is nodes[i+1 : end]; depth 1 is a first byte.
type trieNode struct {
	b     byte
	depth int32
	end   int32
	tok   int32 // a token whose bytes end here (others in Vocab.same), or -1
}

// NewVocab prepares a vocabulary. tokens[i] is the exact bytes token i stands for (byte-level
// BPE bytes, SentencePiece pieces with ▁ as a space, <0xNN> byte tokens as that byte).
// allowed[i] false excludes token i (control tokens); a nil allowed allows every token. eos
// lists the end tokens: they are allowed only where the grammar is complete, whatever allowed
// says. Empty tokens are never allowed as text.
func NewVocab(tokens [][]byte, allowed []bool, eos []int32) *Vocab {
	v := &Vocab{n: len(tokens), tokens: tokens, ok: make([]bool, len(tokens)), isEOS: make([]bool, len(tokens)), same: make([]int32, len(tokens))}
	for _, e := range eos {
		if e >= 0 && int(e) < len(tokens) && !v.isEOS[e] {
			v.isEOS[e] = true
			v.eos = append(v.eos, e)
		}
	}
	var ids []int32
	for i, t := range tokens {
		v.same[i] = -1
		if len(t) == 0 || v.isEOS[i] || (allowed != nil && (i >= len(allowed) || !allowed[i])) {
			continue
		}
		v.ok[i] = true
		ids = append(ids, int32(i))
		v.maxLen = max(v.maxLen, len(t))
	}
	sort.SliceStable(ids, func(a, b int) bool { return bytes.Compare(tokens[ids[a]], tokens[ids[b]]) < 0 })
	// Insert in sorted order: each token shares a prefix with the previous one; path[d] is the
	// node of depth d+1 on the current path.
	var path []int32
	var prev []byte
	for _, id := range ids {
		t := tokens[id]
		if bytes.Equal(t, prev) {
			last := path[len(path)-1]
			v.same[id] = v.same[v.nodes[last].tok]
			v.same[v.nodes[last].tok] = id
			continue
		}
		common := 0
		for common < len(t) && common < len(prev) && t[common] == prev[common] {
			common++
		}
		for len(path) > common {
			v.nodes[path[len(path)-1]].end = int32(len(v.nodes))
			path = path[:len(path)-1]
		}
		for d := common; d < len(t); d++ {
			path = append(path, int32(len(v.nodes)))
			v.nodes = append(v.nodes, trieNode{b: t[d], depth: int32(d + 1), tok: -1})
		}
		v.nodes[path[len(path)-1]].tok = id
		prev = t
	}
	for _, p := range path {
		v.nodes[p].end = int32(len(v.nodes))
	}
	v.tokStart = make([]int32, len(v.nodes)+1)
	for i, nd := range v.nodes {
		v.tokStart[i] = int32(len(v.tokOrder))
		for t := nd.tok; t >= 0; t = v.same[t] {
			v.tokOrder = append(v.tokOrder, t)
		}
	}
	v.tokStart[len(v.nodes)] = int32(len(v.tokOrder))
	// Bytes below each node: a node's set flows into its parent when the scan leaves it.
	v.subGroups = make([]uint64, len(v.nodes))
	// phase[i]: the UTF-8 decoder state after node i's path (-1: invalid); bad[i]: some path
	// below i is not valid UTF-8 from that phase.
	phase := make([]int8, len(v.nodes))
	bad := make([]bool, len(v.nodes))
	var open []int32
	closeTop := func() {
		c := open[len(open)-1]
		open = open[:len(open)-1]
		if len(open) > 0 {
			p := open[len(open)-1]
			v.subGroups[p] |= v.subGroups[c] | 1<<byteGroup[v.nodes[c].b]
			bad[p] = bad[p] || bad[c] || phase[c] < 0
		}
		if phase[c] == 0 && !bad[c] {
			v.subGroups[c] |= validUTF8Below
		}
	}
	for i, nd := range v.nodes {
		for len(open) > 0 && v.nodes[open[len(open)-1]].depth >= nd.depth {
			closeTop()
		}
		from := int32(0)
		if len(open) > 0 {
			from = int32(phase[open[len(open)-1]])
		}
		phase[i] = -1
		if from >= 0 {
			if st, ok := utf8Step(from, nd.b); ok {
				phase[i] = int8(st)
			}
		}
		open = append(open, int32(i))
	}
	for len(open) > 0 {
		closeTop()
	}
	return v
}

// Size is the number of tokens (the mask covers ids 0..Size-1).
func (v *Vocab) Size() int { return v.n }

// MaskWords is the length of a mask for this vocabulary: (Size+63)/64.
func (v *Vocab) MaskWords() int { return (v.n + 63) / 64 }

// validUTF8Below is a flag in subGroups: node i's path ends on a character boundary and
// every path below it continues with valid UTF-8 (a last character may be cut short).
const validUTF8Below = 1 << 63

// utf8Groups are the groups of bytes 0x80..0xFF.
const utf8Groups = 1<<38 | 1<<39

// byteGroup sorts bytes into 40 groups for subtree summaries: one per ASCII punctuation byte
// and space (what grammars tell apart), one each for control bytes, digits, upper and lower
// case letters, UTF-8 continuation bytes and lead bytes.
var byteGroup = func() (g [256]uint8) {
	next := uint8(1)
	for b := range 256 {
		switch {
		case b < 0x20:
			g[b] = 0
		case b >= '0' && b <= '9':
			g[b] = 35
		case b >= 'A' && b <= 'Z':
			g[b] = 36
		case b >= 'a' && b <= 'z':
			g[b] = 37
		case b >= 0x80 && b < 0xC0:
			g[b] = 38
		case b >= 0xC0:
			g[b] = 39
		default:
			g[b] = next
			next++
		}
	}
	return g
}()
