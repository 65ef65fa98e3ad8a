package router

import (
	"fmt"
	"testing"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TestMatchReuseUnit: a replica's match counts only whole runs of its reuse unit, in blocks
// and in weight (the blocks past the last whole run weigh nothing), on the eager walk and the
// lazy one alike, through the shared remote tier too; a unit of 0 (a replica that says none)
// is 1.
func TestMatchReuseUnit(t *testing.T) {
	const bs = 4
	toks := make([]int32, 41*bs)
	for i := range toks {
		toks[i] = int32(i)
	}
	hashes := prefix.BlockHashes(prefix.Root([]byte("id"), ""), toks, bs)
	// Tiers of the held blocks cycle device, host, disk: weights 1, 0.8, 0.5.
	tierOf := func(i int) kvtier.Tier { return []kvtier.Tier{kvtier.Device, kvtier.Host, kvtier.Disk}[i%3] }
	for _, unit := range []int{0, 1, 2, 3, 4, 7, 16, 64} {
		for _, held := range []int{0, 1, 3, 4, 5, 7, 8, 15, 16, 17, 40} {
			for _, viaRemote := range []bool{false, true} {
				ix := newReplicaIndex()
				ix.Reset(kvevents.Snapshot{Epoch: 1, Identity: "6964", BlockSize: bs, ReuseBlocks: unit})
				other := newReplicaIndex()
				other.Reset(kvevents.Snapshot{Epoch: 2, Identity: "6964", BlockSize: bs})
				var evs, remote []kvevents.Event
				for i := range held {
					if viaRemote && i%2 == 1 { // every other block only in another replica's remote tier
						remote = append(remote, kvevents.Event{Kind: kvevents.Stored, Tier: kvtier.Remote, Hash: hashes[i]})
						continue
					}
					evs = append(evs, kvevents.Event{Kind: kvevents.Stored, Tier: tierOf(i), Hash: hashes[i]})
				}
				ix.Apply(evs)
				other.Apply(remote)
				var shared []*replicaIndex
				if viaRemote {
					shared = []*replicaIndex{other}
				}
				u := max(unit, 1)
				wantN := held / u * u
				wantW := 0.0
				for i := range wantN {
					tr := tierOf(i)
					if viaRemote && i%2 == 1 {
						tr = kvtier.Remote
					}
					wantW += defaultTierWeights[tr]
				}
				name := fmt.Sprintf("unit=%d held=%d remote=%v", unit, held, viaRemote)
				n, w := ix.match(hashes, &defaultTierWeights, shared)
				if n != wantN || !reuseNear(w, wantW) {
					t.Errorf("%s: match %d/%v, want %d/%v", name, n, w, wantN, wantW)
				}
				c := &hashChain{identity: "id", blockSize: bs, tokens: toks}
				if cn, cw := ix.matchChain(c, &defaultTierWeights, shared); cn != n || cw != w {
					t.Errorf("%s: matchChain %d/%v, match %d/%v", name, cn, cw, n, w)
				}
			}
		}
	}
}

func reuseNear(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestReuseUnitResets: the unit is the last snapshot's: a resync from a replica restarted
// with another --state-checkpoint-blocks replaces it, and the empty snapshot a garbage line
// leaves (Subscriber) forgets it.
func TestReuseUnitResets(t *testing.T) {
	ix := newReplicaIndex()
	if u := ix.reuseUnit(); u != 1 {
		t.Fatalf("before any snapshot: unit %d", u)
	}
	ix.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 16, ReuseBlocks: 4})
	if u := ix.reuseUnit(); u != 4 {
		t.Fatalf("unit %d, want 4", u)
	}
	ix.Reset(kvevents.Snapshot{Epoch: 2, Identity: "00", BlockSize: 16, ReuseBlocks: 2})
	if u := ix.reuseUnit(); u != 2 {
		t.Fatalf("after a restart: unit %d, want 2", u)
	}
	ix.Reset(kvevents.Snapshot{})
	if u := ix.reuseUnit(); u != 1 {
		t.Fatalf("after garbage: unit %d, want 1", u)
	}
}

// TestBackendStatusReuseUnit: GET /backends rows show each replica's reuse unit, in blocks and
// in tokens, once a snapshot loaded; an older replica's (none said) shows as 1.
func TestBackendStatusReuseUnit(t *testing.T) {
	bs := testBackends(t, 2)
	if st := bs[0].status(); st.ReuseBlocks != 1 || st.MinReusableTokens != 4 {
		t.Errorf("a replica that says no unit: reuse_blocks %d, min_reusable_tokens %d, want 1 and 4", st.ReuseBlocks, st.MinReusableTokens)
	}
	bs[1].index.Reset(kvevents.Snapshot{Epoch: 1, Identity: "00", BlockSize: 16, ReuseBlocks: 4})
	if st := bs[1].status(); st.ReuseBlocks != 4 || st.MinReusableTokens != 64 {
		t.Errorf("hybrid replica: reuse_blocks %d, min_reusable_tokens %d, want 4 and 64", st.ReuseBlocks, st.MinReusableTokens)
	}
	b, err := newBackend("http://10.0.0.9:8080")
	if err != nil {
		t.Fatal(err)
	}
	if st := b.status(); st.ReuseBlocks != 0 || st.MinReusableTokens != 0 {
		t.Errorf("before a snapshot: %+v", st)
	}
}
