package lru

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/tier"
)

// pinModel is the test's store: one List, one Pins, nodes by name, a clock. It does what a
// store does (hostmem): a pinned node lives in Pins, an unpinned one in the List.
type pinModel struct {
	l     List[string]
	p     Pins[string]
	nodes map[string]*Node[string]
	now   time.Time
	reads int // how many times a sweep read the clock
}

func (m *pinModel) node(t *testing.T, d *datadriven.TestData, name string) *Node[string] {
	n, ok := m.nodes[name]
	if !ok {
		t.Fatalf("%s: no node %q", d.Pos, name)
	}
	return n
}

// sweep moves every expired pin to the back of the list and returns their names.
func (m *pinModel) sweep() []string {
	var out []string
	clock := func() time.Time { m.reads++; return m.now }
	now, n := m.p.ExpireNow(clock, func(n *Node[string]) {
		m.l.PushBack(n)
		out = append(out, n.Value)
	})
	if n != len(out) || (m.p.Len()+n > 0) == now.IsZero() {
		panic(fmt.Sprintf("ExpireNow returned (%v, %d) after %d expired", now, n, len(out)))
	}
	return out
}

func (m *pinModel) show() string {
	var b strings.Builder
	var order []string
	for n := m.l.Front(); n != nil; n = m.l.Next(n) {
		order = append(order, n.Value)
	}
	fmt.Fprintf(&b, "lru: %v\n", order)
	type pin struct {
		name    string
		ttl     time.Duration
		expires time.Time
	}
	var pins []pin
	m.p.All(func(n *Node[string], ttl time.Duration, exp time.Time) { pins = append(pins, pin{n.Value, ttl, exp}) })
	slices.SortFunc(pins, func(a, b pin) int {
		if c := a.expires.Compare(b.expires); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	b.WriteString("pins:")
	for _, p := range pins {
		fmt.Fprintf(&b, " %s(ttl=%s left=%s)", p.name, p.ttl, p.expires.Sub(m.now))
	}
	b.WriteString("\n")
	return b.String()
}

// check verifies the heap property and the index of every pinned node.
func (m *pinModel) check(t *testing.T, d *datadriven.TestData) {
	for i, n := range m.p.h {
		if n.pin.idx != i+1 {
			t.Fatalf("%s: node %s at %d has idx %d", d.Pos, n.Value, i, n.pin.idx)
		}
		if n.next != nil {
			t.Fatalf("%s: pinned node %s is in the list", d.Pos, n.Value)
		}
		if i > 0 && m.p.h[(i-1)/2].pin.expires.After(n.pin.expires) {
			t.Fatalf("%s: heap order broken at %d", d.Pos, i)
		}
	}
	// Infos lists what All walks, with the node's key.
	infos := m.p.Infos(func(v string) tier.Key {
		var k tier.Key
		copy(k.Hash[:], v)
		return k
	})
	var all []tier.PinInfo
	m.p.All(func(n *Node[string], ttl time.Duration, exp time.Time) {
		var k tier.Key
		copy(k.Hash[:], n.Value)
		all = append(all, tier.PinInfo{Key: k, TTL: ttl, Expires: exp})
	})
	if !slices.Equal(infos, all) {
		t.Fatalf("%s: Infos %v, All walks %v", d.Pos, infos, all)
	}
	if got := m.l.Len() + m.p.Len(); got != len(m.nodes) {
		t.Fatalf("%s: %d nodes in list+pins, %d exist", d.Pos, got, len(m.nodes))
	}
}

// TestPinsScript runs testdata/pins: the pin state machine of a store with one list.
//
//	push a b ...        new nodes, each the most recent
//	pin a b ... ttl=D   pin (or repin) for D from now; ttl=0 unpins (to the front)
//	touch a ...         a use: a live pin is refreshed (now + TTL), an expired one becomes
//	                    unpinned (front), an unpinned node moves to the front
//	advance D           the clock moves on
//	sweep               expired pins go to the back of the list (and whether it read the clock)
//	oldest a b ...      the least recent unpinned node among those named (List.Oldest)
//	evict [n=N]         take N (default 1) from the back of the list, after a sweep
//	remove a            drop a node wherever it is
//	show
func TestPinsScript(t *testing.T) {
	m := &pinModel{nodes: map[string]*Node[string]{}, now: time.Unix(1000, 0)}
	datadriven.RunTest(t, "testdata/pins", func(t *testing.T, d *datadriven.TestData) string {
		var out strings.Builder
		args := func() []string {
			var names []string
			for _, a := range d.CmdArgs {
				if len(a.Vals) == 0 {
					names = append(names, a.Key)
				}
			}
			return names
		}
		dur := func(key string) time.Duration {
			var s string
			d.ScanArgs(t, key, &s)
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", d.Pos, key, s, err)
			}
			return v
		}
		switch d.Cmd {
		case "push":
			for _, name := range args() {
				n := &Node[string]{Value: name}
				m.nodes[name] = n
				m.l.PushFront(n)
			}
		case "pin":
			ttl := dur("ttl")
			for _, name := range args() {
				n := m.node(t, d, name)
				switch {
				case ttl <= 0 && m.p.Pinned(n):
					m.p.Unpin(n)
					m.l.PushFront(n)
				case ttl <= 0:
				default:
					if !m.p.Pinned(n) {
						m.l.Remove(n)
					}
					m.p.Pin(n, ttl, m.now)
				}
			}
		case "touch":
			for _, name := range args() {
				n := m.node(t, d, name)
				switch {
				case m.p.Pinned(n) && m.p.Expired(n, m.now):
					m.p.Unpin(n)
					m.l.PushFront(n)
					fmt.Fprintf(&out, "%s: pin expired\n", name)
				case m.p.Pinned(n):
					m.p.Touch(n, m.now)
				default:
					m.l.MoveToFront(n)
				}
			}
		case "advance":
			v, err := time.ParseDuration(d.CmdArgs[0].Key)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			m.now = m.now.Add(v)
		case "sweep":
			before := m.reads
			fmt.Fprintf(&out, "expired: %v\n", m.sweep())
			fmt.Fprintf(&out, "clock read: %v\n", m.reads > before)
		case "oldest":
			names := args()
			n := m.l.Oldest(func(v string) bool { return slices.Contains(names, v) })
			if n == nil {
				out.WriteString("oldest: none\n")
			} else {
				fmt.Fprintf(&out, "oldest: %s\n", n.Value)
			}
		case "evict":
			n := 1
			if d.HasArg("n") {
				d.ScanArgs(t, "n", &n)
			}
			if s := m.sweep(); len(s) > 0 {
				fmt.Fprintf(&out, "expired: %v\n", s)
			}
			var gone []string
			for range n {
				b := m.l.Back()
				if b == nil {
					gone = append(gone, "(nothing: only pins)")
					break
				}
				m.l.Remove(b)
				delete(m.nodes, b.Value)
				gone = append(gone, b.Value)
			}
			fmt.Fprintf(&out, "evicted: %v\n", gone)
		case "remove":
			for _, name := range args() {
				n := m.node(t, d, name)
				if m.p.Pinned(n) {
					m.p.Unpin(n)
				} else {
					m.l.Remove(n)
				}
				delete(m.nodes, name)
			}
		case "show":
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		m.check(t, d)
		out.WriteString(m.show())
		return out.String()
	})
}

// TestPinsAgainstOracle drives Pins with random operations and checks PopExpired against a
// brute-force scan of every node's expiry.
func TestPinsAgainstOracle(t *testing.T) {
	var p Pins[int]
	nodes := make([]*Node[int], 64)
	for i := range nodes {
		nodes[i] = &Node[int]{Value: i}
	}
	now := time.Unix(0, 0)
	rng := uint64(1)
	next := func(n uint64) uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return (rng >> 33) % n }
	for step := range 20000 {
		n := nodes[next(uint64(len(nodes)))]
		switch next(5) {
		case 0, 1:
			p.Pin(n, time.Duration(1+next(100))*time.Second, now)
		case 2:
			if p.Pinned(n) {
				p.Touch(n, now)
			}
		case 3:
			if p.Pinned(n) {
				p.Unpin(n)
			}
		case 4:
			now = now.Add(time.Duration(next(20)) * time.Second)
			var want []int
			for _, m := range nodes {
				if m.pin.idx != 0 && !m.pin.expires.After(now) {
					want = append(want, m.Value)
				}
			}
			var got []int
			for m := p.PopExpired(now); m != nil; m = p.PopExpired(now) {
				got = append(got, m.Value)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: expired %v, oracle %v", step, got, want)
			}
		}
		for i, m := range p.h {
			if m.pin.idx != i+1 || (i > 0 && p.h[(i-1)/2].pin.expires.After(m.pin.expires)) {
				t.Fatalf("step %d: heap broken at %d", step, i)
			}
		}
	}
}

func TestPinMisusePanics(t *testing.T) {
	var l List[int]
	var p Pins[int]
	inList, pinned, free := &Node[int]{}, &Node[int]{}, &Node[int]{}
	l.PushFront(inList)
	p.Pin(pinned, time.Second, time.Unix(0, 0))
	for name, f := range map[string]func(){
		"pin a listed node":  func() { p.Pin(inList, time.Second, time.Unix(0, 0)) },
		"pin with ttl 0":     func() { p.Pin(free, 0, time.Unix(0, 0)) },
		"push a pinned node": func() { l.PushFront(pinned) },
		"pushback pinned":    func() { l.PushBack(pinned) },
		"unpin a free node":  func() { p.Unpin(free) },
		"touch a free node":  func() { p.Touch(free, time.Unix(0, 0)) },
		"remove pinned":      func() { l.Remove(pinned) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
