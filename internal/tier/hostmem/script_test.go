package hostmem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/lru"
)

// scriptValue is every scripted value's size: with entryOverhead, one slot is 256 bytes.
const scriptValue = 256 - entryOverhead

// TestScript runs testdata/pins and testdata/owners: the store's pin state machine and its
// per-owner budgets (owners.go) under its budget. Items are
// named by one letter; every value is one slot (256 bytes with the entry overhead).
//
//	new slots=N                 a fresh store of N slots
//	put a b ... [pin=D]         one Put per item, pinned for D if given
//	get a b ...                 one Get of the batch (touched last to first)
//	pin a b ... ttl=D           Pin (ttl=0 unpins)
//	delete a ... / advance D / sweep / show
//	put a b ... owner=N         the items belong to owner N
//	limit owner=N slots=K       owner N's budget (0: none)
//
// Every command prints the LRU order (front first), the pins by expiry with the time left,
// the counters, and what Puts evicted (spilled).
func TestScript(t *testing.T) {
	var (
		s       *Store
		now     time.Time
		spilled []string
	)
	ctx := context.Background()
	key := func(name string) tier.Key { return tier.Key{Hash: prefix.Hash{name[0]}} }
	nameOf := func(k tier.Key) string { return string(k.Hash[:1]) }
	for _, script := range []string{"testdata/pins", "testdata/owners"} {
		datadriven.RunTest(t, script, func(t *testing.T, d *datadriven.TestData) string {
			var out strings.Builder
			var names []string
			for _, a := range d.CmdArgs {
				if len(a.Vals) == 0 {
					names = append(names, a.Key)
				}
			}
			keys := make([]tier.Key, len(names))
			for i, n := range names {
				keys[i] = key(n)
			}
			dur := func(k string) time.Duration {
				if !d.HasArg(k) {
					return 0
				}
				var v string
				d.ScanArgs(t, k, &v)
				x, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				return x
			}
			switch d.Cmd {
			case "new":
				var slots int
				d.ScanArgs(t, "slots", &slots)
				now = time.Unix(1000, 0)
				var err error
				s, err = New(Config{CapacityBytes: int64(slots) * 256, Now: func() time.Time { return now }})
				if err != nil {
					t.Fatal(err)
				}
				s.SpillTo(func(items []tier.Item) {
					for _, it := range items {
						spilled = append(spilled, nameOf(it.Key))
					}
				})
			case "put":
				ttl := dur("pin")
				owner := 0
				if d.HasArg("owner") {
					d.ScanArgs(t, "owner", &owner)
				}
				for _, k := range keys {
					if err := s.Put(ctx, []tier.Item{{Key: k, Value: make([]byte, scriptValue), PinTTL: ttl, Owner: uint16(owner)}}); err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					}
				}
			case "get":
				vals, _ := s.Get(ctx, keys)
				var got []string
				for i, v := range vals {
					if v != nil {
						got = append(got, names[i])
					}
				}
				fmt.Fprintf(&out, "hits: %v\n", got)
			case "pin":
				held, err := s.Pin(ctx, keys, dur("ttl"))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&out, "held: %v\n", held)
			case "delete":
				s.Delete(ctx, keys)
			case "advance":
				x, err := time.ParseDuration(d.CmdArgs[0].Key)
				if err != nil {
					t.Fatal(err)
				}
				now = now.Add(x)
			case "sweep":
				fmt.Fprintf(&out, "expired: %d\n", s.Sweep())
			case "limit":
				var owner, slots int
				d.ScanArgs(t, "owner", &owner)
				d.ScanArgs(t, "slots", &slots)
				s.SetOwnerLimit(uint16(owner), int64(slots)*256)
			case "show":
			default:
				t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
			}
			if len(spilled) > 0 {
				fmt.Fprintf(&out, "spilled: %v\n", spilled)
				spilled = nil
			}
			s.mu.Lock()
			var order []string
			for n := s.mu.lru.Front(); n != nil; n = s.mu.lru.Next(n) {
				order = append(order, nameOf(n.Value.key))
			}
			type pin struct {
				name string
				ttl  time.Duration
				exp  time.Time
			}
			var pins []pin
			s.mu.pins.All(func(n *lru.Node[*entry], ttl time.Duration, exp time.Time) {
				pins = append(pins, pin{nameOf(n.Value.key), ttl, exp})
			})
			// The counters as they are, not through Stats, which sweeps: the script shows what is lazy.
			items, npins, pinned, used, st := len(s.mu.m), s.mu.pins.Len(), s.mu.pinned, s.mu.used, s.mu.stats
			var owners []string
			if s.mu.owners.Limited() {
				for o := uint16(1); o < 10; o++ {
					if u, l := s.mu.owners.Used(o), s.mu.owners.Limit(o); u > 0 || l > 0 {
						owners = append(owners, fmt.Sprintf("%d:%d/%d", o, u/256, l/256))
					}
				}
				owners = append(owners, fmt.Sprintf("over=%d", s.mu.owners.OverCount()))
			}
			s.mu.Unlock()
			slices.SortFunc(pins, func(a, b pin) int {
				if c := a.exp.Compare(b.exp); c != 0 {
					return c
				}
				return strings.Compare(a.name, b.name)
			})
			fmt.Fprintf(&out, "lru: %v\npins:", order)
			for _, p := range pins {
				fmt.Fprintf(&out, " %s(%s, left %s)", p.name, p.ttl, p.exp.Sub(now))
			}
			fmt.Fprintf(&out, "\nitems=%d pinned=%d used=%d/%d slots evictions=%d declined=%d\n",
				items, npins, used/256, s.cfg.CapacityBytes/256, st.Evictions, st.Declined)
			if len(owners) > 0 {
				fmt.Fprintf(&out, "owners (slots used/limit): %s\n", strings.Join(owners, " "))
			}
			if pinned != int64(npins)*256 {
				t.Fatalf("%s: %d pinned bytes for %d pins", d.Pos, pinned, npins)
			}
			return out.String()
		})
	}
}
