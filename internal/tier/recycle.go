package tier

import "context"

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

// CheckedGetter is a Store that checks each value's integrity with a checksum of its own (the
// disk tier's file checksum) and can take the reader's verification instead of its own pass
// over the value. A value is an encoded Record, which carries its own CRC-32C, and every reader
// verifies every value (Store.Get): a store that checksums the value as well reads a cold
// block's bytes from memory twice, the store's checksum and then the reader's
// (DecodeVerifyInto) — on a loaded machine the CPU a disk restore needs beyond the read
// itself. With GetChecked the reader's pass is the only one. Optional: found by type
// assertion.
type CheckedGetter interface {
	// GetChecked is Get, with check(i, v) called on each value v the store read for keys[i]
	// (on the goroutine that read it, before GetChecked returns) in place of the store's own
	// checksum of v. check returns nil only when v is intact: an encoded Record whose CRC-32C
	// matched (DecodeVerify and DecodeVerifyInto succeed only then). The store then checks
	// the rest of what it holds (its framing) without reading v again, and so finds a damaged
	// value exactly as its own checksum would: the same damaged items are counted, dropped
	// and returned as the store's substitute (see Get). When check fails, the store checks v
	// itself, as Get would.
	//
	// checked[i] reports that vals[i] is the value check(i, ·) saw and returned nil for, and
	// that the store found the item intact: check's result stands. Where checked[i] is false
	// and vals[i] is not nil (check failed, or the store found damage and substituted the
	// value), the reader verifies vals[i] as it would a value from Get.
	GetChecked(ctx context.Context, keys []Key, check func(i int, v []byte) error) (vals [][]byte, checked []bool, err error)
}
