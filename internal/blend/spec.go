package blend

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"stockpot/internal/prefix"
)

// ErrInvalid wraps every error about a request's marks: the client's mistake (a 400).
var ErrInvalid = errors.New("blend: invalid chunk marks")

// Policy chooses the tokens a blend recomputes.
type Policy uint8

const (
	// EPIC recomputes the first ⌈f·len⌉ tokens of each chunk (the default).
	EPIC Policy = iota
	// CacheBlend recomputes the tokens whose K/V deviate most on an early layer.
	CacheBlend
)

// Policy names on the wire.
const (
	PolicyEPICName       = "epic"
	PolicyCacheBlendName = "cacheblend"
)

func (p Policy) String() string {
	switch p {
	case EPIC:
		return PolicyEPICName
	case CacheBlend:
		return PolicyCacheBlendName
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy reads a policy name; "" is the default, EPIC.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", PolicyEPICName:
		return EPIC, nil
	case PolicyCacheBlendName:
		return CacheBlend, nil
	}
	return 0, fmt.Errorf("%w: policy %q is not %q or %q", ErrInvalid, s, PolicyCacheBlendName, PolicyEPICName)
}

// Chunk is a marked span [Start, End) of the prompt, in prompt tokens.
type Chunk struct{ Start, End int }

// Len is the chunk's length in tokens.
func (c Chunk) Len() int { return c.End - c.Start }

// Spec is one request's blending: the chunks it marks and how much to recompute.
type Spec struct {
	Chunks []Chunk
	// Recompute is the fraction f in [0, 1] of chunk tokens recomputed; 1 is a full
	// prefill's result, bitwise.
	Recompute float64
	Policy    Policy
}

// Limits bound a Spec beyond what the prompt itself bounds.
type Limits struct {
	// MaxChunks is the most chunks one request may mark (each costs a lookup, a block table
	// and, cold, a prefill at position 0).
	MaxChunks int
	// ContextLength is the model's: a chunk longer than it can never have been computed.
	ContextLength int
}

// DefaultMaxChunks bounds the chunks of one request: a RAG prompt carries tens of retrieved
// passages, not thousands; the bound keeps one request's per-chunk work (a hash chain and a
// lookup each) small beside its prefill.
const DefaultMaxChunks = 64

// Normalize returns a copy of s with its chunks sorted by start. The caller's slice is left
// as it was.
func (s Spec) Normalize() Spec {
	s.Chunks = slices.Clone(s.Chunks)
	slices.SortFunc(s.Chunks, func(a, b Chunk) int { return a.Start - b.Start })
	return s
}

// Validate checks s against a prompt of promptLen tokens: every chunk non-empty and inside
// the prompt, no two overlapping, at most MaxChunks of them, none longer than the context,
// and the fraction a number in [0, 1]. The chunks may come in any order. Every error wraps
// ErrInvalid and names the offending chunk by its index in s.Chunks.
func (s Spec) Validate(promptLen int, lim Limits) error {
	if math.IsNaN(s.Recompute) || s.Recompute < 0 || s.Recompute > 1 {
		return fmt.Errorf("%w: recompute %v is outside [0, 1]", ErrInvalid, s.Recompute)
	}
	if s.Policy != EPIC && s.Policy != CacheBlend {
		return fmt.Errorf("%w: unknown policy %v", ErrInvalid, s.Policy)
	}
	if len(s.Chunks) == 0 {
		return fmt.Errorf("%w: no chunks marked", ErrInvalid)
	}
	if lim.MaxChunks > 0 && len(s.Chunks) > lim.MaxChunks {
		return fmt.Errorf("%w: %d chunks marked, at most %d", ErrInvalid, len(s.Chunks), lim.MaxChunks)
	}
	for i, c := range s.Chunks {
		switch {
		case c.Start < 0 || c.End < 0:
			return fmt.Errorf("%w: chunk %d [%d, %d) has a negative offset", ErrInvalid, i, c.Start, c.End)
		case c.End <= c.Start:
			return fmt.Errorf("%w: chunk %d [%d, %d) is empty", ErrInvalid, i, c.Start, c.End)
		case lim.ContextLength > 0 && c.Len() > lim.ContextLength:
			return fmt.Errorf("%w: chunk %d [%d, %d) has %d tokens, longer than the context of %d", ErrInvalid, i, c.Start, c.End, c.Len(), lim.ContextLength)
		case c.End > promptLen:
			return fmt.Errorf("%w: chunk %d [%d, %d) ends past the prompt's %d tokens", ErrInvalid, i, c.Start, c.End, promptLen)
		}
	}
	order := make([]int, len(s.Chunks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return s.Chunks[a].Start - s.Chunks[b].Start })
	for k := 1; k < len(order); k++ {
		a, b := s.Chunks[order[k-1]], s.Chunks[order[k]]
		if b.Start < a.End {
			return fmt.Errorf("%w: chunks %d [%d, %d) and %d [%d, %d) overlap", ErrInvalid, order[k-1], a.Start, a.End, order[k], b.Start, b.End)
		}
	}
	return nil
}

// chunkDomain is the domain tag of chunk chains (prefix.DerivedRoot).
const chunkDomain = "blend-chunk"

// ChunkRoot is the root of the chains that cache chunks for requests whose own chain starts
// at root (prefix.Root of the identity and the request's salt): a chunk's blocks hash as
// prefix.BlockHashes(ChunkRoot(root), chunk tokens, B). Never the public root of a shared
// prefix: a tenant's chunks are its own.
func ChunkRoot(root prefix.Hash) prefix.Hash { return prefix.DerivedRoot(root, chunkDomain) }
