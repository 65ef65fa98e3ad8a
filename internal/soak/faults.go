package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// FaultKind is one kind of injected fault.
type FaultKind uint8

const (
	Kill9       FaultKind = iota // kill -9 a replica, restart it on the same port and tiers
	Restart                      // SIGTERM a replica (graceful drain), restart it
	CorruptDisk                  // damage files of a replica's disk tier while it runs
	CorruptDown                  // kill -9 a replica, damage its disk files, restart it
	DiskFull                     // fill a replica's disk volume with another's data, free it later
	RedisDown                    // stop redis-server, start it again later
	RedisSlow                    // delay every Redis reply, for a while
	DropEvents                   // cut the router's event streams from the replicas
	RouterKill9                  // kill -9 the router, restart it
	// Prefill/decode faults (pd.go; only a run with prefill and decode replicas has them):
	// each is carried out at its moment in one handed-off request.
	PrefillKill9    // kill -9 the prefill replica after it answered, before the decode pulls
	DecodeKillPull  // kill -9 the decode replica while it pulls (the client retries), restart it
	LeaseExpire     // wait until the prefill's lease on the transfer expired, then decode
	CorruptTransfer // flip a byte of the transfer stream between prefill and decode
	nFaultKinds
)

var faultNames = [...]string{"kill9", "restart", "corrupt_disk", "corrupt_down", "disk_full", "redis_down", "redis_slow", "drop_events", "router_kill9",
	"pd_prefill_kill9", "pd_decode_kill_pull", "pd_lease_expire", "pd_corrupt_transfer"}

func (k FaultKind) String() string {
	if int(k) < len(faultNames) {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", k)
}

// ParseFaults reads a comma-separated list of fault names ("all" for every one, "none" for
// none).
func ParseFaults(s string) ([]FaultKind, error) {
	switch s {
	case "all":
		var all []FaultKind
		for k := range nFaultKinds {
			all = append(all, k)
		}
		return all, nil
	case "none", "":
		return nil, nil
	}
	var out []FaultKind
	for _, name := range strings.Split(s, ",") {
		i := slices.Index(faultNames[:], strings.TrimSpace(name))
		if i < 0 {
			return nil, fmt.Errorf("unknown fault %q (have %s, all, none)", name, strings.Join(faultNames[:], ", "))
		}
		out = append(out, FaultKind(i))
	}
	return out, nil
}

// Fault is one injection: at op index At, kind Kind on replica Replica; faults with a
// duration (DiskFull, RedisDown, RedisSlow) end at op index Until.
type Fault struct {
	At, Until int
	Kind      FaultKind
	Replica   int
}

func (f Fault) String() string {
	s := fmt.Sprintf("@%d %s", f.At, f.Kind)
	switch f.Kind {
	case Kill9, Restart, CorruptDisk, CorruptDown, DiskFull:
		s += fmt.Sprintf(" replica %d", f.Replica)
	}
	if f.Until > f.At {
		s += fmt.Sprintf(" until @%d", f.Until)
	}
	return s
}

// Handoff reports whether the fault is one of a handed-off request (a run with prefill and
// decode replicas only).
func (k FaultKind) Handoff() bool { return k >= PrefillKill9 && k < nFaultKinds }

// Lasting reports whether the fault holds over a span of ops.
func (k FaultKind) Lasting() bool { return k == DiskFull || k == RedisDown || k == RedisSlow }

// Schedule spreads rounds of the given faults over n ops: each round injects every kind once,
// in a seeded order, at seeded points of its span, so each kind recurs through the run and
// meets the others. A lasting fault holds for a seeded stretch inside its round.
func Schedule(seed uint64, n, replicas, rounds int, kinds []FaultKind) []Fault {
	if n <= 0 || len(kinds) == 0 || rounds <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed^0xfa17, seed))
	var out []Fault
	span := n / rounds
	slot := span / (len(kinds) + 1)
	if slot == 0 {
		return nil
	}
	for r := range rounds {
		order := slices.Clone(kinds)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for i, k := range order {
			at := r*span + (i+1)*slot - slot/2 + rng.IntN(max(slot/2, 1))
			f := Fault{At: at, Kind: k, Replica: rng.IntN(max(replicas, 1))}
			if k.Lasting() {
				f.Until = at + max(slot/2, 1) + rng.IntN(max(slot, 1))
				f.Until = min(f.Until, n-1)
			}
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return a.At - b.At })
	return out
}
