package engine

// slab hands out short slices of T cut from larger chunks, so that the outputs of a decode
// step (a Token per stream, its top logprobs) cost no allocation of their own.
//
// Ownership: every slice taken goes to a stream's consumer, who may keep it as long as it
// likes, so no slot is ever handed out twice: a slab only batches the allocations, it never
// recycles. Each slice is capped (s[:n:n]), so a consumer's append cannot reach the next
// one's slots.
//
// A chunk is sized for what may still come (room, in elements): at most first elements the
// first time, twice the last chunk after. A request whose output fits its first chunk
// allocates once; a longer one allocates log₂ of its length, never once per token.
type slab[T any] struct {
	free []T // the current chunk's untaken slots
	last int // the size of the last chunk (0: none yet)
}

// slabTokens is the first chunk's size in tokens: 256 Tokens are 8 KiB, a small part of a
// request's cost, and cover most completions in one allocation.
const slabTokens = 256

// take returns n fresh slots (zeroed, length and capacity n). room is how many elements
// may still be taken, this call's included (a hint for the chunk size: a wrong one costs
// memory or allocations, never correctness); first is the first chunk's most.
func (s *slab[T]) take(n, room, first int) []T {
	if len(s.free) < n {
		size := min(room, first)
		if s.last > 0 {
			size = min(room, 2*s.last)
		}
		size = max(size, n)
		s.free, s.last = make([]T, size), size
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}
