package prefix

import "testing"

func TestDerivedRoot(t *testing.T) {
	id := []byte("model-fingerprint")
	root := Root(id, "tenant")
	d := DerivedRoot(root, "blend-chunk")
	if !d.IsRoot() {
		t.Fatalf("DerivedRoot %s is not a root", d.Short())
	}
	for name, other := range map[string]Hash{
		"parent":        root,
		"other salt":    DerivedRoot(Root(id, "other"), "blend-chunk"),
		"other domain":  DerivedRoot(root, "blend-chunk2"),
		"root of salt":  Root(id, "blend-chunk"),
		"first block":   Chain(root, []int32{1, 2, 3, 4}, nil),
		"derived twice": DerivedRoot(d, "blend-chunk"),
	} {
		if other == d {
			t.Errorf("DerivedRoot equals the %s hash", name)
		}
	}
	if again := DerivedRoot(root, "blend-chunk"); again != d {
		t.Errorf("DerivedRoot is not deterministic: %s then %s", d.Short(), again.Short())
	}
}
