package kvtier

import (
	"slices"
	"testing"
)

func TestStringParse(t *testing.T) {
	want := []string{"device", "host", "disk", "remote", "transfer"}
	if Count != len(want) {
		t.Fatalf("Count = %d, want %d", Count, len(want))
	}
	for i, n := range want {
		tr := Tier(i)
		if got := tr.String(); got != n {
			t.Errorf("Tier(%d).String() = %q, want %q", i, got, n)
		}
		if got, err := Parse(n); err != nil || got != tr {
			t.Errorf("Parse(%q) = %v, %v; want %v", n, got, err, tr)
		}
		if !tr.Valid() {
			t.Errorf("Tier(%d) not valid", i)
		}
	}
	if got := Tier(9).String(); got != "tier(9)" {
		t.Errorf("Tier(9).String() = %q", got)
	}
	if Tier(Count).Valid() {
		t.Error("Tier(Count) valid")
	}
	for _, s := range []string{"", "Host", "gpu", "tier(1)"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q): no error", s)
		}
	}
	if Device != 0 || len(Below) != Count-2 || Below[0] != Host || slices.Contains(Below, Transfer) {
		t.Errorf("Device = %d, Below = %v", Device, Below)
	}
}
