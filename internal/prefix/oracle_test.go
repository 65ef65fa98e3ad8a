package prefix

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRandomAgainstOracle drives a Cache with random requests over a tiny
// vocabulary (so prefixes collide often) and checks it after every operation
// against a dumb model:
//
//   - the oracle knows which token prefixes are cached only from the events
//     (Stored adds, Evicted/Removed/Cleared drop), and computes the expected
//     hit count by brute force over token prefixes, no hashes involved;
//   - a simulated arena records what each block holds ("K/V" = the prefix
//     key written by the request that computed it), so every hit is checked
//     to return the K/V of exactly its own prefix, and Allocate is checked
//     never to hand out a block the oracle still thinks is cached (eviction
//     visible before reuse);
//   - reference counts match the blocks running requests hold, and return to
//     zero at the end.
func TestRandomAgainstOracle(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runOracle(t, seed, 3000) })
	}
}

type oracleReq struct {
	owner     Owner
	salt      string
	root      Hash
	tokens    []int32
	hashes    []Hash
	table     []BlockID
	committed int
}

func prefixKey(salt string, tokens []int32) string { return fmt.Sprint(salt, "|", tokens) }

func runOracle(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	bs := 2 + int(seed%2)
	cfg := DefaultConfig()
	cfg.BlockSize = bs
	cfg.NumBlocks = 12 + rng.IntN(20)
	cfg.MinHitsToProtect = int(seed % 3)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	salts := []string{"", "s"}
	cached := map[string]BlockID{}   // oracle: prefix key -> block, from events
	blockKey := map[BlockID]string{} // inverse
	hashKey := map[Hash]string{}     // every hash the test computed -> its prefix key
	content := make([]string, cfg.NumBlocks)
	var running []*oracleReq
	var owners Owner

	drain := func() {
		for _, ev := range c.Events() {
			switch ev.Kind {
			case Stored:
				k, ok := hashKey[ev.Hash]
				if !ok {
					t.Fatalf("stored unknown hash %s", ev.Hash.Short())
				}
				if content[ev.Block] != k {
					t.Fatalf("stored block %d holds %q, want %q", ev.Block, content[ev.Block], k)
				}
				cached[k] = ev.Block
				blockKey[ev.Block] = k
			case Evicted, Removed:
				k := hashKey[ev.Hash]
				if cached[k] != ev.Block {
					t.Fatalf("%s block %d for %q, oracle has block %d", ev.Kind, ev.Block, k, cached[k])
				}
				if ev.Kind == Evicted && content[ev.Block] != k {
					t.Fatalf("evicted block %d holds %q before copy-out, want %q", ev.Block, content[ev.Block], k)
				}
				delete(cached, k)
				delete(blockKey, ev.Block)
			case Cleared:
				clear(cached)
				clear(blockKey)
			}
		}
	}
	check := func(step int, what string) {
		t.Helper()
		drain()
		if err := c.CheckInvariants(); err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		refs := map[BlockID]int{}
		for _, r := range running {
			for _, b := range r.table {
				refs[b]++
			}
		}
		for b, n := range refs {
			if got := c.pool.RefCount(b); got != n {
				t.Fatalf("step %d (%s): block %d has %d refs, requests hold %d", step, what, b, got, n)
			}
		}
		if st := c.Stats(); st.Referenced != len(refs) {
			t.Fatalf("step %d (%s): %d referenced, requests hold %d", step, what, st.Referenced, len(refs))
		}
	}
	release := func(i int) {
		r := running[i]
		c.Release(r.table)
		c.Abort(r.owner)
		running = append(running[:i], running[i+1:]...)
	}
	commitSome := func(r *oracleReq, n int) {
		for ; n > 0 && r.committed < len(r.hashes); n-- {
			i := r.committed
			parent := r.root
			if i > 0 {
				parent = r.hashes[i-1]
			}
			own := r.table[i]
			key := prefixKey(r.salt, r.tokens[:(i+1)*bs])
			content[own] = key // the engine writes the K/V, then commits
			canon, stored := c.Commit(r.hashes[i], parent, r.tokens[i*bs:(i+1)*bs], own)
			if !stored && canon != own {
				if content[canon] != key {
					t.Fatalf("canonical block %d holds %q, want %q", canon, content[canon], key)
				}
				c.Ref(canon)
				c.Release([]BlockID{own})
				r.table[i] = canon
			}
			r.committed++
		}
	}

	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 4: // a new request
			owners++
			r := &oracleReq{owner: owners, salt: salts[rng.IntN(len(salts))]}
			r.root = Root([]byte("m"), r.salt)
			n := 1 + rng.IntN(5*bs)
			for range n {
				r.tokens = append(r.tokens, int32(rng.IntN(2)))
			}
			r.hashes = BlockHashes(r.root, r.tokens, bs)
			for i, h := range r.hashes {
				hashKey[h] = prefixKey(r.salt, r.tokens[:(i+1)*bs])
			}
			drain()
			// Brute force: the longest run of cached prefixes, capped.
			want := 0
			for want < MaxMatchBlocks(len(r.tokens), bs) {
				if _, ok := cached[prefixKey(r.salt, r.tokens[:(want+1)*bs])]; !ok {
					break
				}
				want++
			}
			m := c.Match(r.root, r.tokens)
			if len(m.Blocks) != want {
				t.Fatalf("step %d: match %v salt %q: %d blocks, oracle %d", step, r.tokens, r.salt, len(m.Blocks), want)
			}
			for i, b := range m.Blocks {
				if k := prefixKey(r.salt, r.tokens[:(i+1)*bs]); content[b] != k {
					t.Fatalf("step %d: hit block %d holds %q, want %q", step, b, content[b], k)
				}
			}
			r.table = m.Blocks
			r.committed = len(m.Blocks)
			need := (len(r.tokens)+bs-1)/bs - len(r.table)
			avail := c.Available()
			got, err := c.Allocate(need)
			if (err != nil) != (need > avail) {
				t.Fatalf("step %d: Allocate(%d) with %d available: %v", step, need, avail, err)
			}
			if err != nil {
				c.Release(r.table)
				check(step, "alloc failed")
				continue
			}
			drain() // evictions become visible before the blocks are written
			for _, b := range got {
				if k, ok := blockKey[b]; ok {
					t.Fatalf("step %d: Allocate handed out block %d still cached as %q", step, b, k)
				}
				content[b] = "garbage"
			}
			r.table = append(r.table, got...)
			running = append(running, r)
			if rng.IntN(2) == 0 {
				c.MarkPending(r.hashes[r.committed:], r.owner)
			}
			check(step, "start")
		case op < 7 && len(running) > 0:
			commitSome(running[rng.IntN(len(running))], 1+rng.IntN(3))
			check(step, "commit")
		case op < 9 && len(running) > 0:
			release(rng.IntN(len(running)))
			check(step, "release")
		case op == 9 && rng.IntN(20) == 0:
			if rng.IntN(4) == 0 {
				c.Clear()
			} else {
				c.Invalidate(Root([]byte("m"), salts[rng.IntN(len(salts))]))
			}
			check(step, "invalidate")
		}
	}
	for len(running) > 0 {
		release(0)
	}
	check(steps, "end")
	st := c.Stats()
	if st.Referenced != 0 || st.Cached != len(cached) || st.Free+st.Cached != st.Blocks {
		t.Fatalf("end: %+v, oracle caches %d", st, len(cached))
	}
	if st.HitBlocks == 0 || st.Evictions == 0 {
		t.Errorf("seed %d exercised too little: %+v", seed, st)
	}
}
