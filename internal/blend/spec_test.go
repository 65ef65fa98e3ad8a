package blend

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	lim := Limits{MaxChunks: 3, ContextLength: 100}
	for _, tc := range []struct {
		name string
		spec Spec
		n    int
		want string // "" for valid; else a substring of the error
	}{
		{"one chunk", Spec{Chunks: []Chunk{{0, 10}}, Recompute: 0.15}, 20, ""},
		{"unsorted disjoint", Spec{Chunks: []Chunk{{10, 20}, {0, 10}}}, 20, ""},
		{"fraction 1", Spec{Chunks: []Chunk{{0, 10}}, Recompute: 1}, 20, ""},
		{"none", Spec{}, 20, "no chunks"},
		{"empty chunk", Spec{Chunks: []Chunk{{5, 5}}}, 20, "empty"},
		{"reversed", Spec{Chunks: []Chunk{{6, 5}}}, 20, "empty"},
		{"negative", Spec{Chunks: []Chunk{{-1, 5}}}, 20, "negative"},
		{"past prompt", Spec{Chunks: []Chunk{{10, 21}}}, 20, "past the prompt"},
		{"overlap", Spec{Chunks: []Chunk{{10, 15}, {0, 11}}}, 20, "overlap"},
		{"too many", Spec{Chunks: []Chunk{{0, 1}, {1, 2}, {2, 3}, {3, 4}}}, 20, "at most 3"},
		{"longer than context", Spec{Chunks: []Chunk{{0, 101}}}, 200, "longer than the context"},
		{"fraction above 1", Spec{Chunks: []Chunk{{0, 1}}, Recompute: 1.5}, 20, "outside [0, 1]"},
		{"fraction below 0", Spec{Chunks: []Chunk{{0, 1}}, Recompute: -0.1}, 20, "outside [0, 1]"},
	} {
		err := tc.spec.Validate(tc.n, lim)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: have %v, want no error", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid)):
			t.Errorf("%s: have %v, want an ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
}

func TestNormalizeKeepsCaller(t *testing.T) {
	s := Spec{Chunks: []Chunk{{10, 20}, {0, 5}}}
	n := s.Normalize()
	if n.Chunks[0] != (Chunk{0, 5}) || s.Chunks[0] != (Chunk{10, 20}) {
		t.Errorf("have normalized %v and caller's %v", n.Chunks, s.Chunks)
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": EPIC, "epic": EPIC, "cacheblend": CacheBlend} {
		if p, err := ParsePolicy(in); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", in, p, err, want)
		}
	}
	if _, err := ParsePolicy("EPIC2"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParsePolicy(EPIC2): have %v, want ErrInvalid", err)
	}
}
