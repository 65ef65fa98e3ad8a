package api

import (
	"encoding/json"
	"testing"
)

// TestChunkTemplateFieldsKnown: the chunk types still have exactly the fields the template
// checks; when this fails, teach textChunk and build the new field (or the stream falls back
// to encoding/json for every token).
func TestChunkTemplateFieldsKnown(t *testing.T) {
	if !templateFieldsKnown {
		t.Fatal("api chunk types changed: the SSE text-chunk template is off; update chunkjson.go")
	}
}

// chunkStringSeeds are texts a JSON string encoder must get right.
var chunkStringSeeds = []string{"", "hello", " wor", `"q"\`, "<a href='x'>&amp;</a>", "\x00\x01\b\f\n\r\t\x1f\x7f",
	"é漢字🙂", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "\U0010FFFF"}

// FuzzAppendJSONString: appendJSONString writes exactly what json.Marshal writes for a string.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range chunkStringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if have := appendJSONString(nil, s); string(have) != string(want) {
			t.Fatalf("%q: have %s, want %s", s, have, want)
		}
	})
}
