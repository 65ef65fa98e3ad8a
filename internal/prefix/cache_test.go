package prefix

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// testRequest is the test's stand-in for an engine request.
type testRequest struct {
	owner     Owner
	root      Hash
	tokens    []int32
	m         Match
	table     []BlockID
	committed int // table[:committed] are hits or committed blocks
}

// scenario drives a Cache from testdata scripts. Commands (r= names a
// request, tokens are a list of ids and ranges, e.g. tokens=(1-8,99)):
//
//	new blocks=N [block-size=B] [protect=H]
//	match r=A [salt=S] tokens=(...) [look]
//	                                  Match; the hits become A's first blocks;
//	                                  look: Lookup (no reuse counted)
//	reused r=A                        Reused of A's matched blocks
//	alloc r=A                         Allocate the rest of A's prompt blocks
//	mark r=A                          MarkPending A's blocks after its hits
//	commit r=A [n=K] [keep=true]      Commit A's next K (default all) full blocks;
//	                                  keep: on a duplicate, keep the own block
//	run r=A [salt=S] tokens=(...)     match + alloc + mark + commit
//	release r=A                       Release A's blocks, Abort A
//	abort r=A                         Abort A (drop its pending marks)
//	invalidate [salt=S] / clear / dump / stats
//	drop [salt=S] [all]                DropRoot (or DropAll): dropped and busy counts
//
// After every command it checks invariants and prints the drained events and
// the block counts.
type scenario struct {
	t      *testing.T
	c      *Cache
	reqs   map[string]*testRequest
	owners Owner
	out    strings.Builder
}

var testIdentity = []byte("test-model")

func parseTokens(t *testing.T, d *datadriven.TestData) []int32 {
	var out []int32
	for _, arg := range d.CmdArgs {
		if arg.Key != "tokens" {
			continue
		}
		for _, v := range arg.Vals {
			lo, hi, isRange := strings.Cut(v, "-")
			a, err := strconv.Atoi(strings.TrimSpace(lo))
			if err != nil {
				t.Fatalf("%s: bad token %q", d.Pos, v)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
					t.Fatalf("%s: bad token range %q", d.Pos, v)
				}
			}
			for x := a; x <= b; x++ {
				out = append(out, int32(x))
			}
		}
	}
	return out
}

func (s *scenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

func (s *scenario) req(d *datadriven.TestData) (string, *testRequest) {
	var name string
	d.ScanArgs(s.t, "r", &name)
	r := s.reqs[name]
	if r == nil && d.Cmd != "match" && d.Cmd != "run" {
		s.t.Fatalf("%s: no request %q", d.Pos, name)
	}
	return name, r
}

func (s *scenario) salt(d *datadriven.TestData) string {
	salt := ""
	if d.HasArg("salt") {
		d.ScanArgs(s.t, "salt", &salt)
	}
	return salt
}

func (s *scenario) match(d *datadriven.TestData) *testRequest {
	name, r := s.req(d)
	if r != nil {
		s.t.Fatalf("%s: request %q exists", d.Pos, name)
	}
	s.owners++
	r = &testRequest{owner: s.owners, root: Root(testIdentity, s.salt(d)), tokens: parseTokens(s.t, d)}
	s.reqs[name] = r
	if d.HasArg("look") {
		r.m = s.c.Lookup(r.root, BlockHashes(r.root, r.tokens, s.c.BlockSize()), r.tokens)
	} else {
		r.m = s.c.Match(r.root, r.tokens)
	}
	r.table = slices.Clone(r.m.Blocks)
	r.committed = len(r.table)
	bs := s.c.BlockSize()
	s.printf("%s: prompt %d tokens, hit %d blocks (cached_tokens=%d), pending %d, blocks %v\n",
		name, len(r.tokens), len(r.m.Blocks), len(r.m.Blocks)*bs, r.m.Pending, r.m.Blocks)
	return r
}

func (s *scenario) alloc(name string, r *testRequest) bool {
	need := (len(r.tokens)+s.c.BlockSize()-1)/s.c.BlockSize() - len(r.table)
	got, err := s.c.Allocate(need)
	if err != nil {
		s.printf("%s: alloc %d: error: %v\n", name, need, err)
		return false
	}
	r.table = append(r.table, got...)
	s.printf("%s: allocated %v\n", name, got)
	return true
}

func (s *scenario) mark(name string, r *testRequest) {
	n := s.c.MarkPending(r.m.Hashes[r.committed:], r.owner)
	s.printf("%s: marked %d pending\n", name, n)
}

func (s *scenario) commit(name string, r *testRequest, n int, keep bool) {
	bs := s.c.BlockSize()
	for range n {
		i := r.committed
		if i >= len(r.m.Hashes) || i >= len(r.table) {
			break
		}
		parent := r.root
		if i > 0 {
			parent = r.m.Hashes[i-1]
		}
		own := r.table[i]
		canon, stored := s.c.Commit(r.m.Hashes[i], parent, r.tokens[i*bs:(i+1)*bs], own)
		switch {
		case stored:
			s.printf("%s: block %d -> %d stored\n", name, i, own)
		case canon != own && keep:
			s.printf("%s: block %d -> %d duplicate of %d, kept own\n", name, i, own, canon)
		case canon != own:
			// Switch to the canonical copy, as the engine would.
			s.c.Ref(canon)
			s.c.Release([]BlockID{own})
			r.table[i] = canon
			s.printf("%s: block %d -> %d duplicate, switched to canonical %d\n", name, i, own, canon)
		default:
			s.printf("%s: block %d -> %d not stored\n", name, i, own)
		}
		r.committed++
	}
}

func (s *scenario) run(d *datadriven.TestData) {
	s.t.Helper()
	switch d.Cmd {
	case "diverge": // diverge.go: diverge [salt=S] tokens=(...) [max=N]
		s.diverge(d)
	case "new":
		cfg := DefaultConfig()
		cfg.BlockSize = 4
		d.ScanArgs(s.t, "blocks", &cfg.NumBlocks)
		if d.HasArg("block-size") {
			d.ScanArgs(s.t, "block-size", &cfg.BlockSize)
		}
		if d.HasArg("protect") {
			d.ScanArgs(s.t, "protect", &cfg.MinHitsToProtect)
		}
		c, err := New(cfg)
		if err != nil {
			s.printf("error: %v\n", err)
			return
		}
		s.c = c
		s.reqs = map[string]*testRequest{}
	case "match":
		s.match(d)
	case "run":
		r := s.match(d)
		name, _ := s.req(d)
		if s.alloc(name, r) {
			s.mark(name, r)
			s.commit(name, r, len(r.m.Hashes), false)
		}
	case "reused":
		_, r := s.req(d)
		s.c.Reused(r.m.Blocks)
	case "alloc":
		name, r := s.req(d)
		s.alloc(name, r)
	case "mark":
		name, r := s.req(d)
		s.mark(name, r)
	case "commit":
		name, r := s.req(d)
		n := len(r.m.Hashes)
		if d.HasArg("n") {
			d.ScanArgs(s.t, "n", &n)
		}
		keep := false
		if d.HasArg("keep") {
			d.ScanArgs(s.t, "keep", &keep)
		}
		s.commit(name, r, n, keep)
	case "release":
		name, r := s.req(d)
		s.c.Release(r.table)
		s.c.Abort(r.owner)
		delete(s.reqs, name)
		s.printf("%s: released %v\n", name, r.table)
	case "abort":
		_, r := s.req(d)
		s.c.Abort(r.owner)
	case "invalidate":
		n := s.c.Invalidate(Root(testIdentity, s.salt(d)))
		s.printf("invalidated %d blocks\n", n)
	case "clear":
		s.printf("cleared %d blocks\n", s.c.Clear())
	case "drop":
		var dr Dropped
		if d.HasArg("all") {
			dr = s.c.DropAll()
		} else {
			dr = s.c.DropRoot(Root(testIdentity, s.salt(d)))
		}
		s.printf("dropped %d blocks, %d busy\n", dr.Blocks, dr.Busy)
	case "own": // quota.go: own r=NAME owner=N tags the request's committed blocks
		_, r := s.req(d)
		var owner int
		d.ScanArgs(s.t, "owner", &owner)
		for _, b := range r.table[:r.committed] {
			s.c.SetOwner(b, uint16(owner))
		}
		s.printf("owner %d holds %d blocks\n", owner, s.c.OwnerBlocks(uint16(owner)))
	case "limit": // limit owner=N blocks=K
		var owner, blocks int
		d.ScanArgs(s.t, "owner", &owner)
		d.ScanArgs(s.t, "blocks", &blocks)
		s.c.SetOwnerLimit(uint16(owner), blocks)
		s.printf("owner %d limit %d, holds %d, %d owners over quota\n", owner, blocks, s.c.OwnerBlocks(uint16(owner)), s.c.overOwners)
	case "dump":
		s.dump()
	case "stats":
		st := s.c.Stats()
		s.printf("queries=%d query_tokens=%d hit_blocks=%d hit_tokens=%d stored=%d duplicates=%d collisions=%d evictions=%d removed=%d pending=%d indexed=%d\n",
			st.Queries, st.QueryTokens, st.HitBlocks, st.HitTokens, st.Stored, st.Duplicates, st.Collisions, st.Evictions, st.Removed, st.Pending, st.Indexed)
	default:
		s.t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
}

// dump prints every indexed block and the current eviction order of leaves.
func (s *scenario) dump() {
	c := s.c
	for i := range c.meta {
		e := &c.meta[i]
		if e.state == stateNone {
			continue
		}
		state := "live"
		if e.state == stateDead {
			state = "dead"
		}
		s.printf("block %d: %s tokens %v depth %d ref %d hits %d children %d last %d\n",
			i, state, c.blockTokens(BlockID(i)), e.depth, c.pool.RefCount(BlockID(i)), e.hits, e.children, e.lastUse)
	}
	leaves := slices.Clone(c.heap)
	slices.SortFunc(leaves, func(a, b BlockID) int {
		if c.evictBefore(a, b) {
			return -1
		}
		return 1
	})
	s.printf("evictable leaves, first out first: %v\n", leaves)
}

func TestCache(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &scenario{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.out.Reset()
			s.run(d)
			if s.c != nil {
				if err := s.c.CheckInvariants(); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				for _, ev := range s.c.Events() {
					s.printf("event %s block %d tokens %v\n", ev.Kind, ev.Block, ev.Tokens)
				}
				st := s.c.Stats()
				s.printf("free=%d referenced=%d cached=%d evictable=%d\n", st.Free, st.Referenced, st.Cached, st.Evictable)
			}
			return s.out.String()
		})
	})
}

// TestAppendAllocate: AppendAllocate appends to the caller's slice (allocating nothing when
// it has room), takes blocks from the free list and then by eviction as Allocate does, and on
// ErrNoSpace hands dst back as it was, taking nothing.
func TestAppendAllocate(t *testing.T) {
	c, err := New(Config{NumBlocks: 4, BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]BlockID, 1, 8)
	dst[0] = 99 // the caller's own entry stays
	dst, err = c.AppendAllocate(dst, 2)
	if err != nil || len(dst) != 3 || dst[0] != 99 || c.Available() != 2 {
		t.Fatalf("AppendAllocate(2): %v %v, %d available", dst, err, c.Available())
	}
	before := dst
	if got, err := c.AppendAllocate(dst, 3); !errors.Is(err, ErrNoSpace) || len(got) != len(before) || c.Available() != 2 {
		t.Fatalf("AppendAllocate(3) of 2: %v %v, %d available; want ErrNoSpace, dst unchanged, nothing taken", got, err, c.Available())
	}
	if n := testing.AllocsPerRun(1, func() {
		var err error
		if dst, err = c.AppendAllocate(dst, 1); err != nil {
			t.Fatal(err)
		}
		c.Release(dst[len(dst)-1:])
		dst = dst[:len(dst)-1]
	}); n != 0 {
		t.Errorf("AppendAllocate into room: %v allocations, want 0", n)
	}
	// Cache a block, free it, and take the whole pool: the cached one is evicted with its event.
	root := Root([]byte("id"), "")
	h := BlockHashes(root, []int32{5, 6}, 2)[0]
	if got, ok := c.Commit(h, root, []int32{5, 6}, dst[1]); got != dst[1] || !ok {
		t.Fatalf("committed into %d (%v), want %d", got, ok, dst[1])
	}
	c.Release(dst[1:])
	c.Events()
	all, err := c.AppendAllocate(nil, 4)
	if err != nil || len(all) != 4 {
		t.Fatalf("AppendAllocate(4) of 4: %v %v", all, err)
	}
	if evs := c.Events(); len(evs) != 1 || evs[0].Kind != Evicted || evs[0].Hash != h {
		t.Errorf("events %+v, want the cached block evicted", evs)
	}
}
