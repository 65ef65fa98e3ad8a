package quant

// How far ahead of the weight rows being read the amd64 kernels prefetch, in bytes. The
// generated kernels read these variables (asmgen_prefetch.go, asmgen_k.go); the defaults won
// on the project's 2-core VM, and kernels.CalibratePrefetch measures others on the machine
// it runs on. Prefetching never changes a value, only how soon the bytes arrive.
//
// REQUIRES: set only while no MatMul runs (start-up); the kernels read them without a lock.
var (
	// prefetchBytes: the pair and AVX-512 K kernels prefetch at least this far ahead, in
	// whole groups of rows (at least one group).
	prefetchBytes int64 = 8192
	// prefetchAhead: the AVX2/VNNI K-quant kernels, and the AVX2 Q5_0 kernel of four
	// activation rows (q5_0Tile1x4AVX2), prefetch this far ahead of the row they read;
	// the Q4_0/Q5_0/Q8_0 row and tile kernels without the pair kernels at least this far
	// (and at least the next group of rows).
	prefetchAhead int64 = 2048
)

// Prefetch is the kernels' prefetch distances.
type Prefetch struct {
	Rows   int // at least this far ahead, in whole row groups (the pair kernels of Q4_0, Q5_0, Q8_0; AVX-512 K-quants)
	KAhead int // exactly this far ahead (AVX2 and VNNI K-quants); at least this far for Q4_0, Q5_0, Q8_0 without the pair kernels
}

// DefaultPrefetch is the distances the kernels use until SetPrefetch.
var DefaultPrefetch = Prefetch{Rows: 8192, KAhead: 2048}

// CurrentPrefetch returns the distances in use.
func CurrentPrefetch() Prefetch {
	return Prefetch{Rows: int(prefetchBytes), KAhead: int(prefetchAhead)}
}

// SetPrefetch sets the distances (each at least 0, at most 1 MiB; a value outside is
// clamped). REQUIRES: no MatMul running.
func SetPrefetch(p Prefetch) {
	clamp := func(v int) int64 { return int64(min(max(v, 0), 1<<20)) }
	prefetchBytes, prefetchAhead = clamp(p.Rows), clamp(p.KAhead)
}

// Prefetch knobs: which distance a weight type's decode kernel reads on this CPU.
const (
	KnobNone   = ""        // the kernel prefetches nothing of its own (or not on this CPU)
	KnobRows   = "rows"    // Prefetch.Rows
	KnobKAhead = "k-ahead" // Prefetch.KAhead
)
