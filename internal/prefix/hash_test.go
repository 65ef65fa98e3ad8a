package prefix

import (
	"slices"
	"testing"
)

func TestHashChain(t *testing.T) {
	root := Root([]byte("model-a"), "")
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	hs := BlockHashes(root, toks, 4)
	if len(hs) != 2 {
		t.Fatalf("BlockHashes: %d hashes for 9 tokens of block 4, want 2 (full blocks only)", len(hs))
	}
	if want := Chain(root, toks[:4], nil); hs[0] != want {
		t.Errorf("block 0: have %s, want Chain(root, tokens[:4])", hs[0].Short())
	}
	if want := Chain(hs[0], toks[4:8], nil); hs[1] != want {
		t.Errorf("block 1: have %s, want Chain(h0, tokens[4:8])", hs[1].Short())
	}
	if !root.IsRoot() || hs[0].IsRoot() || hs[1].IsRoot() {
		t.Errorf("IsRoot: root %v, blocks %v %v", root.IsRoot(), hs[0].IsRoot(), hs[1].IsRoot())
	}
	for _, tc := range []struct {
		name string
		a, b Hash
	}{
		{"identity", Root([]byte("model-a"), ""), Root([]byte("model-b"), "")},
		{"salt", Root([]byte("model-a"), ""), Root([]byte("model-a"), "t1")},
		{"identity/salt boundary", Root([]byte("ab"), "c"), Root([]byte("a"), "bc")},
		{"token order", Chain(root, []int32{1, 2}, nil), Chain(root, []int32{2, 1}, nil)},
		{"token width", Chain(root, []int32{1, 256}, nil), Chain(root, []int32{256, 1}, nil)},
		{"tokens vs extra", Chain(root, []int32{1}, nil), Chain(root, nil, []byte{1, 0, 0, 0})},
		{"extra", Chain(root, []int32{1}, nil), Chain(root, []int32{1}, []byte("img"))},
		{"parent", Chain(root, []int32{1}, nil), Chain(Root(nil, "x"), []int32{1}, nil)},
	} {
		if tc.a == tc.b {
			t.Errorf("%s: equal hashes %s", tc.name, tc.a.Short())
		}
	}
	// Deterministic and platform-independent: a fixed vector.
	if got, want := Chain(Root([]byte("m"), ""), []int32{1, 2, 3}, nil).Short(), goldenChain; got != want {
		t.Errorf("Chain golden: have %s, want %s (the encoding changed: bump the v1 tag)", got, want)
	}
	// Appending reuses capacity and matches BlockHashes.
	buf := make([]Hash, 0, 8)
	if got := AppendBlockHashes(buf, root, toks, 4); !slices.Equal(got, hs) || &got[0] != &buf[:1][0] {
		t.Errorf("AppendBlockHashes did not append in place")
	}
}

const goldenChain = "6f2f9c78"

func TestConfigValidate(t *testing.T) {
	cfg := Config{NumBlocks: 4}
	got, err := cfg.validate()
	if err != nil || got.BlockSize != 16 || cfg.BlockSize != 0 {
		t.Errorf("validate: %+v %v (caller's struct %+v)", got, err, cfg)
	}
	for _, bad := range []Config{{}, {NumBlocks: 4, BlockSize: -1}, {NumBlocks: 4, MinHitsToProtect: -1}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

func TestMisusePanics(t *testing.T) {
	c, _ := New(Config{NumBlocks: 4, BlockSize: 2})
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	root := Root(nil, "")
	mustPanic("commit of a free block", func() { c.Commit(Chain(root, []int32{1, 2}, nil), root, []int32{1, 2}, 0) })
	mustPanic("release of a free block", func() { c.Release([]BlockID{0}) })
	mustPanic("ref of a free block", func() { c.Ref(1) })
	b, _ := c.Allocate(1)
	mustPanic("commit of a short block", func() { c.Commit(Chain(root, []int32{1}, nil), root, []int32{1}, b[0]) })
	c.Release(b)
	mustPanic("double release", func() { c.Release(b) })
	if err := c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
