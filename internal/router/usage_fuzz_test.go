package router

import (
	"bytes"
	"testing"
)

// FuzzParseStreamUsage: the router reads the prompt and cached token counts from the tail of
// a replica's SSE stream (bytes from another process, cut anywhere by the 16 KiB tail). It
// never panics, and what it reports is the usage of one data: line of the tail (from a data:
// to the end of a line).
func FuzzParseStreamUsage(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\ndata: [DONE]\n\n",
		"ns\":[],\"usage\":{\"prompt_tokens\":4}}\n\ndata: [DONE]\n\n",
		"data: {\"usage\":null}\n\ndata:{\"usage\":{\"prompt_tokens\":7}}",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\"\"}}]}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n",
		"data: \"usage\"", "\"usage\"data:", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tail []byte) {
		u := parseStreamUsage(tail)
		if !u.ok {
			return
		}
		var starts, ends []int
		for i := 0; i+len("data:") <= len(tail); i++ {
			if bytes.HasPrefix(tail[i:], []byte("data:")) {
				starts = append(starts, i+len("data:"))
			}
		}
		for i, c := range tail {
			if c == '\n' {
				ends = append(ends, i)
			}
		}
		ends = append(ends, len(tail))
		if len(starts)*len(ends) > 20000 {
			return
		}
		for _, s := range starts {
			for _, e := range ends {
				if e >= s && parseUsage(bytes.TrimSpace(tail[s:e])) == u {
					return
				}
			}
		}
		t.Fatalf("usage %+v is no data: line's of %q", u, tail)
	})
}
