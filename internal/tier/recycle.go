package tier

// Recycler is a Store whose Get reads each value into a buffer of its own (the disk tier's
// aligned read buffers) and can reuse that buffer for a later Get once the caller is done
// with the value. A restore verifies a block straight into the pool (DecodeVerifyInto) and
// then never looks at the bytes again: recycling them spares the next restore an allocation
// and its zeroing, which cost as much as the read itself from a warm page cache, and the
// garbage collector the rest. Optional: found by type assertion.
type Recycler interface {
	// Recycle hands back values this Store's Get returned.
	//
	// REQUIRES: nothing reads or holds any of the values, or any slice of them, any more
	// (a Record decoded from one aliases it: Aux, and KV unless decoded Into).
	Recycle(vals [][]byte)
}
