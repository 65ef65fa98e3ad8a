package kvtier

import (
	"fmt"
	"strconv"
)

// Tier is where a block lives, fastest first. The zero value is Device.
type Tier uint8

const (
	Device Tier = iota // the working block pool
	Host               // host memory offload
	Disk               // local disk offload
	Remote             // a shared remote store
	// Transfer is the blocks a decode replica pulled from the prefill replica that computed
	// its prompt (prefill/decode disaggregation): not a tier blocks are written down to, but
	// a source a request's prompt comes from, read before every tier below.
	Transfer
	count
)

// Count is the number of tiers: the length of arrays indexed by Tier.
const Count = int(count)

// Below are the tiers under the device that blocks are written down to, fastest first
// (Transfer is a source only).
var Below = []Tier{Host, Disk, Remote}

var names = [...]string{Device: "device", Host: "host", Disk: "disk", Remote: "remote", Transfer: "transfer"}

// String returns the wire name ("device", "host", "disk", "remote"), or
// "tier(N)" for a value out of range.
func (t Tier) String() string {
	if int(t) < len(names) {
		return names[t]
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is one of the named tiers.
func (t Tier) Valid() bool { return t < count }

// Parse is the inverse of String for the named tiers.
func Parse(s string) (Tier, error) {
	for t, n := range names {
		if n == s {
			return Tier(t), nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q", s)
}

// Stat is one tier's row of the stockpot_kv_cache_* metrics.
type Stat struct {
	Tier          Tier
	UsedBytes     int64
	CapacityBytes int64
	Evictions     uint64
	Items         int64 // blocks held (GET /v1/cache's residency)
}

// Counts is a count per tier, indexed by Tier.
type Counts [Count]uint64
