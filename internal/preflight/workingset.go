package preflight

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Prompt is one recent request's prompt as the server renders it, with its cache salt.
type Prompt struct {
	Salt   string
	Tokens []int32
}

// ReusedBlocks is the reusable working set of prompts in blocks: the distinct full blocks
// (by their chain: salt and every token up to the block's end, as the prefix cache keys
// them) that two or more of the prompts contain. A block only one prompt has is a one-off:
// the tiers need not hold it. Checked against a brute force in the tests.
func ReusedBlocks(prompts []Prompt, blockSize int) int {
	if blockSize <= 0 {
		return 0
	}
	seen := map[[32]byte]int{}
	var buf []byte
	for _, p := range prompts {
		h := sha256.Sum256([]byte(p.Salt))
		for end := blockSize; end <= len(p.Tokens); end += blockSize {
			buf = append(buf[:0], h[:]...)
			for _, t := range p.Tokens[end-blockSize : end] {
				buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
			}
			h = sha256.Sum256(buf)
			seen[h]++
		}
	}
	n := 0
	for _, c := range seen {
		if c >= 2 {
			n++
		}
	}
	return n
}

// MedianTokens is the median prompt length (the lower middle of an even count); 0 for none.
func MedianTokens(prompts []Prompt) int {
	if len(prompts) == 0 {
		return 0
	}
	ns := make([]int, len(prompts))
	for i, p := range prompts {
		ns[i] = len(p.Tokens)
	}
	slices.Sort(ns)
	return ns[(len(ns)-1)/2]
}
