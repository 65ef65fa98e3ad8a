package router

import (
	"strings"
	"testing"
)

// TestUsageDialects: every dialect's usage is read, answers and streams, and a missing
// cached count is unknown (cachedKnown false), never 0.
func TestUsageDialects(t *testing.T) {
	for _, tc := range []struct {
		name         string
		d            dialect
		body         string
		prompt       int
		cached       int
		cachedKnown  bool
		ok, transfer bool
	}{
		{"chat", dialectOpenAI, `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":8}}}`, 10, 8, true, true, false},
		{"chat, cached 0", dialectOpenAI, `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}}`, 10, 0, true, true, false},
		{"chat, no details", dialectOpenAI, `{"usage":{"prompt_tokens":10}}`, 10, 0, false, true, false},
		{"chat, details without cached", dialectOpenAI, `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{}}}`, 10, 0, false, true, false},
		{"chat, transfer", dialectOpenAI, `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":2},"cache":{"transfer_tokens":6}}}`, 10, 2, true, true, true},
		{"no usage", dialectOpenAI, `{"choices":[]}`, 0, 0, false, false, false},
		{"not json", dialectResponses, `{"usage":`, 0, 0, false, false, false},
		{"responses", dialectResponses, `{"object":"response","usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":16},"output_tokens":3}}`, 20, 16, true, true, false},
		{"responses, no details", dialectResponses, `{"usage":{"input_tokens":20,"output_tokens":3}}`, 20, 0, false, true, false},
		{"responses event", dialectResponses, `{"type":"response.completed","response":{"usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":4}}}}`, 20, 4, true, true, false},
		{"responses event without usage", dialectResponses, `{"type":"response.created","response":{"usage":null}}`, 0, 0, false, false, false},
		{"messages", dialectMessages, `{"type":"message","usage":{"input_tokens":5,"cache_read_input_tokens":12,"cache_creation_input_tokens":3,"output_tokens":2}}`, 20, 12, true, true, false},
		{"messages, no cache fields", dialectMessages, `{"usage":{"input_tokens":5,"output_tokens":2}}`, 5, 0, false, true, false},
		{"messages start", dialectMessages, `{"type":"message_start","message":{"usage":{"input_tokens":1,"cache_read_input_tokens":9}}}`, 10, 9, true, true, false},
		// A chat answer's prompt_tokens is not read as a Messages prompt, nor the reverse.
		{"messages ignores prompt_tokens", dialectMessages, `{"usage":{"prompt_tokens":10}}`, 0, 0, false, true, false},
	} {
		u := parseUsageFor(tc.d, []byte(tc.body))
		if u.ok != tc.ok || u.prompt != tc.prompt || u.cached != tc.cached || u.cachedKnown != tc.cachedKnown || (u.transfer != 0) != tc.transfer {
			t.Errorf("%s: %+v, want ok %v prompt %d cached %d known %v", tc.name, u, tc.ok, tc.prompt, tc.cached, tc.cachedKnown)
		}
	}
}

// TestUsageStreams: a Responses stream's usage is its completed event's; a Messages stream's
// is message_start's prompt and cached count with message_delta's output (a delta without
// cache fields keeps them); a stream that never says the cached count leaves it unknown; an
// event split over reads still counts once whole.
func TestUsageStreams(t *testing.T) {
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	for _, tc := range []struct {
		name        string
		d           dialect
		stream      string
		prompt      int
		cached      int
		cachedKnown bool
	}{
		{"responses", dialectResponses,
			ev("response.created", `{"type":"response.created","response":{"id":"r","usage":null}}`) +
				ev("response.output_text.delta", `{"type":"response.output_text.delta","delta":"hi"}`) +
				ev("response.completed", `{"type":"response.completed","response":{"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":24},"output_tokens":2}}}`),
			30, 24, true},
		{"responses, cached unknown", dialectResponses,
			ev("response.completed", `{"type":"response.completed","response":{"usage":{"input_tokens":30,"output_tokens":2}}}`),
			30, 0, false},
		{"messages", dialectMessages,
			ev("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":4,"cache_read_input_tokens":16,"cache_creation_input_tokens":0,"output_tokens":1}}}`) +
				ev("content_block_delta", `{"type":"content_block_delta","delta":{"text":"usage"}}`) +
				ev("message_delta", `{"type":"message_delta","usage":{"output_tokens":7}}`),
			20, 16, true},
		{"messages, cached unknown", dialectMessages,
			ev("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":4,"output_tokens":1}}}`) +
				ev("message_delta", `{"type":"message_delta","usage":{"output_tokens":7}}`),
			4, 0, false},
	} {
		whole := usageScanner{d: tc.d}
		whole.scan([]byte(tc.stream))
		// The relay scans complete events only (sseBoundary); feed them one at a time.
		split := usageScanner{d: tc.d}
		for _, e := range strings.SplitAfter(tc.stream, "\n\n") {
			split.scan([]byte(e))
		}
		for _, u := range []usageInfo{whole.u, split.u} {
			if !u.ok || u.prompt != tc.prompt || u.cached != tc.cached || u.cachedKnown != tc.cachedKnown {
				t.Errorf("%s: %+v, want prompt %d cached %d known %v", tc.name, u, tc.prompt, tc.cached, tc.cachedKnown)
			}
		}
	}
	// A chat stream's usage chunk: the last data line with usage; without details, unknown.
	u := parseStreamUsage([]byte("data: {\"choices\":[]}\n\ndata: {\"usage\":{\"prompt_tokens\":9}}\n\ndata: [DONE]\n\n"))
	if !u.ok || u.prompt != 9 || u.cachedKnown {
		t.Fatalf("chat stream without cached_tokens: %+v", u)
	}
}

// FuzzParseUsageFor: any bytes, any dialect: no panic, and a usage that says nothing of the
// cached count never claims to know it.
func FuzzParseUsageFor(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":8}}}`,
		`{"response":{"usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":16}}}}`,
		`{"message":{"usage":{"input_tokens":5,"cache_read_input_tokens":12}}}`,
		`{"usage":null}`, `[]`, ``,
	} {
		for d := range 3 {
			f.Add(uint8(d), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, d uint8, b []byte) {
		u := parseUsageFor(dialect(d%3), b)
		if !u.ok && (u.prompt != 0 || u.cachedKnown) {
			t.Fatalf("no usage, yet %+v", u)
		}
		if u.cachedKnown && !saysCached(b) {
			t.Fatalf("cached count known from %q", b)
		}
	})
}

// saysCached reports whether b may name a cached count (encoding/json matches keys without
// regard to case, and a key may be escaped).
func saysCached(b []byte) bool {
	s := strings.ToLower(string(b))
	return strings.Contains(s, "cache") || strings.Contains(s, `\u`)
}

// FuzzUsageScanner: a Responses or Messages stream's bytes, in any split: no panic, and the
// cached count is known only when some event said it.
func FuzzUsageScanner(f *testing.F) {
	f.Add(true, []byte("data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":2}}}}\n\n"), uint16(10))
	f.Add(false, []byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":2}}}\n\ndata: {\"usage\":{\"output_tokens\":1}}\n\n"), uint16(40))
	f.Add(false, []byte("\"usage\"data:\n\"usage\""), uint16(1))
	f.Fuzz(func(t *testing.T, responses bool, b []byte, cut uint16) {
		d := dialectMessages
		if responses {
			d = dialectResponses
		}
		s := usageScanner{d: d}
		k := int(cut) % (len(b) + 1)
		s.scan(b[:k])
		s.scan(b[k:])
		if s.u.cachedKnown && !saysCached(b) {
			t.Fatalf("cached count known from %q", b)
		}
	})
}
