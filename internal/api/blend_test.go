package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseBlend(t *testing.T) {
	f := 0.3
	for _, tc := range []struct {
		in   string
		want *BlendParams
		err  string
	}{
		{in: ``},
		{in: `null`},
		{in: `{"chunks": [[3, 10], [10, 20]], "recompute": 0.3, "policy": "epic"}`, want: &BlendParams{Chunks: [][2]int{{3, 10}, {10, 20}}, Recompute: &f, Policy: "epic"}},
		{in: `{"chunks": []}`, want: &BlendParams{Chunks: [][2]int{}}},
		{in: `{}`, want: &BlendParams{}}, // the request's parser refuses it without marks (TestBlendMarks)
		{in: `{"chunks": [[1, 2, 3]]}`, err: "chunks[0] must be a pair"},
		{in: `{"chunks": [[1]]}`, err: "chunks[0] must be a pair"},
		{in: `{"chunks": [[1.5, 2]]}`, err: "chunks[0] must be a pair"},
		{in: `{"chunks": [[1, 2]], "fraction": 0.1}`, err: "unknown field"},
		{in: `{"chunks": [[1, 2]], "recompute": "high"}`, err: "blend must be an object"},
		{in: `true`, err: "blend must be an object"},
		{in: `{"chunks": [[1, 2]]} {}`, err: "trailing"},
	} {
		have, err := ParseBlend(json.RawMessage(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: have error %v, want one containing %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: have error %v", tc.in, err)
		case tc.err == "" && !reflect.DeepEqual(have, tc.want):
			t.Errorf("%s: have %+v, want %+v", tc.in, have, tc.want)
		}
		if e, ok := err.(*Error); err != nil && (!ok || e.Status != 400 || e.Param != "blend") {
			t.Errorf("%s: error %#v is not a 400 naming blend", tc.in, err)
		}
	}
}

func FuzzParseBlend(f *testing.F) {
	for _, s := range []string{`{"chunks": [[3, 10], [10, 20]], "recompute": 0.3, "policy": "epic"}`, `{"chunks": [[1]]}`, `null`, `{"chunks":[[-1,1e3]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseBlend(json.RawMessage(b))
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if p != nil && len(p.Chunks) > MaxBlendChunksWire {
			t.Fatalf("%d chunks passed", len(p.Chunks))
		}
	})
}
