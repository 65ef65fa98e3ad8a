package lint

import (
	"errors"
	"strings"
	"testing"

	"stockpot/internal/miss"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		in, body, path, session, err string
	}{
		{in: `{"messages":[{"role":"user","content":"hi"}]}`, body: `{"messages":[{"role":"user","content":"hi"}]}`},
		{in: `  {"prompt":"x"}  `, body: `{"prompt":"x"}`},
		{in: `{"body":{"prompt":"x"},"path":"/v1/completions","session_id":"s1"}`, body: `{"prompt":"x"}`, path: "/v1/completions", session: "s1"},
		{in: `{"request":"{\"prompt\":\"x\"}","session":"s2"}`, body: `{"prompt":"x"}`, session: "s2"},
		{in: ``, err: "blank"},
		{in: `   `, err: "blank"},
		{in: `[1,2]`, err: "not a JSON object"},
		{in: `{"messages":[`, err: "not valid JSON"},
		{in: `{"body":[1]}`, err: "body is not a JSON object"},
		{in: `{"body":"nope"}`, err: "body is not a JSON object"},
		{in: `{"request":7}`, err: "request is not a JSON object"},
		{in: `{"path":"/v1/chat/completions","at":"2026-12-01T12:00:00Z","body":null,"skipped":"body of 2000000 bytes"}`, err: "the server did not keep this body: body of 2000000 bytes"},
		{in: `{"path":"/v1/completions","session_id":"s3","at":"2026-12-01T12:00:00Z","body":{"prompt":"x"}}`, body: `{"prompt":"x"}`, path: "/v1/completions", session: "s3"},
	} {
		l, err := ParseLine([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseLine(%q): error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || string(l.Body) != tc.body || l.Path != tc.path || l.Session != tc.session {
			t.Errorf("ParseLine(%q) = %q %q %q, %v; want %q %q %q", tc.in, l.Body, l.Path, l.Session, err, tc.body, tc.path, tc.session)
		}
	}
	if _, err := ParseLine(nil); !errors.Is(err, ErrBlank) {
		t.Errorf("nil line: %v, want ErrBlank", err)
	}
}

// FuzzLintLine: any line parses to a JSON object body or fails with an error; never a panic.
func FuzzLintLine(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"body":{"prompt":"x","cache_salt":"t"},"path":"/v1/completions","session_id":"s1"}`,
		`{"request":"{\"input\":\"x\"}"}`,
		`{"system":"s","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		`{"messages":[`, `[]`, `"x"`, ``, `{"body":null}`,
		`{"path":"/v1/chat/completions","at":"2026-12-01T12:00:00Z","body":null,"skipped":"body of 2000000 bytes"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := ParseLine(raw)
		if err != nil {
			return
		}
		if len(l.Body) == 0 || l.Body[0] != '{' {
			t.Fatalf("body %q is not an object", l.Body)
		}
		for _, fx := range Fixers {
			out, err := fx.Apply(l.Body)
			if err == nil && len(out) == 0 {
				t.Fatalf("%s: empty body from %q", fx.Name, l.Body)
			}
		}
		_ = sessionOf(l)
	})
}

func TestFixers(t *testing.T) {
	body := `{"model":"m","tools":[{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}},{"type":"function","function":{"name":"a"}}],` +
		`"messages":[{"role":"system","content":"Now: 2026-12-01T10:40:31Z  id 3f2b8c1e-9a4d-4e6b-8f00-12ab34cd56ef\n\n"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{\"z\":1,\"a\":2}"}}]}],"cache_salt":"t1"}`
	want := map[string]string{
		"timestamps": `{"model":"m","tools":[{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}},{"type":"function","function":{"name":"a"}}],"messages":[{"role":"system","content":"Now: <timestamp>  id 3f2b8c1e-9a4d-4e6b-8f00-12ab34cd56ef\n\n"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{\"z\":1,\"a\":2}"}}]}],"cache_salt":"t1"}`,
		"ids":        `{"model":"m","tools":[{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}},{"type":"function","function":{"name":"a"}}],"messages":[{"role":"system","content":"Now: 2026-12-01T10:40:31Z  id <id>\n\n"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{\"z\":1,\"a\":2}"}}]}],"cache_salt":"t1"}`,
		"order":      `{"cache_salt":"t1","messages":[{"content":"Now: 2026-12-01T10:40:31Z  id 3f2b8c1e-9a4d-4e6b-8f00-12ab34cd56ef\n\n","role":"system"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"a\":2,\"z\":1}","name":"a"},"id":"c","type":"function"}]}],"model":"m","tools":[{"function":{"name":"a"},"type":"function"},{"function":{"name":"b","parameters":{"properties":{},"type":"object"}},"type":"function"}]}`,
		"whitespace": `{"model":"m","tools":[{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}},{"type":"function","function":{"name":"a"}}],"messages":[{"role":"system","content":"Now: 2026-12-01T10:40:31Z id 3f2b8c1e-9a4d-4e6b-8f00-12ab34cd56ef"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{\"z\":1,\"a\":2}"}}]}],"cache_salt":"t1"}`,
	}
	for _, f := range Fixers {
		got, err := f.Apply([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if w, ok := want[f.Name]; ok && string(got) != w {
			t.Errorf("%s:\n got %s\nwant %s", f.Name, got, w)
		}
		if f.Name == "salt" && strings.Contains(string(got), "cache_salt") {
			t.Errorf("salt: %s", got)
		}
	}
	if _, err := Fixers[0].Apply([]byte(`{"a":`)); err == nil {
		t.Error("a truncated body was fixed")
	}
}

// byteText: one token per byte.
type byteText struct{}

func (byteText) Decode(ids []int32) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}
func (byteText) Piece(id int32) []byte   { return []byte{byte(id)} }
func (byteText) IsControl(id int32) bool { return false }

// bytePrompts renders a completion-like body {"prompt": "...", "cache_salt": "..."} one
// token per byte.
func bytePrompts(l Line) (Prompt, error) {
	body := string(l.Body)
	i := strings.Index(body, `"prompt":"`)
	if i < 0 {
		return Prompt{}, errors.New("no prompt")
	}
	rest := body[i+len(`"prompt":"`):]
	rest = rest[:strings.Index(rest, `"`)]
	toks := make([]int32, len(rest))
	for k := range rest {
		toks[k] = int32(rest[k])
	}
	salt := ""
	if j := strings.Index(body, `"cache_salt":"`); j >= 0 {
		s := body[j+len(`"cache_salt":"`):]
		salt = s[:strings.Index(s, `"`)]
	}
	return Prompt{Tokens: toks, Salt: salt}, nil
}

func TestAnalyze(t *testing.T) {
	base := "Report for the harbour office, generated at "
	tail := ". Summarise the open items and who owns each of them, newest first."
	lines := []string{
		`{"prompt":"` + base + `2026-11-30T09:12:44Z` + tail + `"}`,
		`{"prompt":"` + base + `2026-11-30T09:13:51Z` + tail + `"}`,
		`not json`,
		`{"prompt":"` + base + `2026-11-30T09:14:02Z` + tail + `","cache_salt":"b"}`,
		`{"nope":1}`,
	}
	var entries []Entry
	var bad []Malformed
	for i, s := range lines {
		l, err := ParseLine([]byte(s))
		if err != nil {
			bad = append(bad, Malformed{Line: i + 1, Error: err.Error()})
			continue
		}
		entries = append(entries, Entry{Number: i + 1, Line: l})
	}
	rep := Analyze(entries, bytePrompts, byteText{}, Config{BlockSize: 8})
	if len(bad) != 1 || bad[0].Line != 3 || len(rep.Malformed) != 1 || rep.Malformed[0].Line != 5 {
		t.Errorf("malformed: parse %+v, render %+v; want lines 3 and 5", bad, rep.Malformed)
	}
	if rep.Requests != 3 || rep.Causes[miss.Timestamp] != 1 || rep.Causes[miss.Salt] != 1 || rep.Causes[miss.NewContent] != 1 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Misses) != 2 || rep.Misses[0].Line != 2 || rep.Misses[0].Cause != miss.Timestamp || rep.Misses[1].Cause != miss.Salt {
		t.Errorf("misses %+v", rep.Misses)
	}
	if len(rep.Fixes) != 2 || rep.Fixes[0].Name != "timestamps" || rep.Fixes[1].Name != "salt" {
		t.Fatalf("fixes %+v", rep.Fixes)
	}
	// Fixed: the three prompts are one, reused up to the last full block before the last token.
	n := len(base + "<timestamp>" + tail)
	want := float64(2*((n-1)/8*8)) / float64(3*n)
	if rep.AllFixed != want {
		t.Errorf("all fixed %.4f, want %.4f", rep.AllFixed, want)
	}
	if err := Check(rep, 0.99); !errors.Is(err, ErrUnder) {
		t.Errorf("Check 0.99: %v", err)
	}
	if err := Check(rep, 0); err != nil {
		t.Errorf("Check 0: %v", err)
	}
}
