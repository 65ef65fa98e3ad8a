package router

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestParseTokenArray(t *testing.T) {
	for _, in := range []string{`[]`, `[1]`, ` [1, 2 ,3] `, "[0,\n4095]", `[2147483647]`, `[2147483648]`, `[-1]`, `[1.5]`, `[1,]`, `[1 2]`, `["a"]`, `[1]x`, `[`, ``, `[01]`} {
		got, ok := parseTokenArray([]byte(in))
		var want []int32
		werr := json.Unmarshal([]byte(in), &want)
		if ok {
			if werr != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%q: have %v, encoding/json says %v (%v)", in, got, want, werr)
			}
		} else if werr == nil {
			// Falling back is always allowed; note it only for plain arrays.
			t.Logf("%q: fast path declined (encoding/json: %v)", in, want)
		}
	}
}

func TestParseStreamUsage(t *testing.T) {
	stream := "data: {\"choices\":[{\"text\":\"a\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n" +
		"data: [DONE]\n\n"
	u := parseStreamUsage([]byte(stream))
	if !u.ok || u.prompt != 40 || u.cached != 32 {
		t.Fatalf("have %+v, want prompt 40 cached 32", u)
	}
	if u := parseStreamUsage([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n")); u.ok {
		t.Fatalf("no usage: have %+v", u)
	}
}
