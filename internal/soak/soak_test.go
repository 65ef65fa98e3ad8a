package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestGeneratorIsSeeded(t *testing.T) {
	a, b := NewGenerator(DefaultMix(7, 2, true)), NewGenerator(DefaultMix(7, 2, true))
	c := NewGenerator(DefaultMix(8, 2, true))
	kinds := map[Kind]int{}
	via := map[int]int{}
	differ := false
	for range 2000 {
		x, y, z := a.Next(), b.Next(), c.Next()
		if string(x.Body) != string(y.Body) || x.Kind != y.Kind || x.Via != y.Via {
			t.Fatalf("op %d differs between two generators with one seed", x.ID)
		}
		differ = differ || string(x.Body) != string(z.Body)
		kinds[x.Kind]++
		via[x.Via]++
		switch {
		case x.Kind == Cancel || x.Kind == Disconnect:
			if x.OracleBody != nil {
				t.Errorf("op %d (%s) is judged", x.ID, x.Kind)
			}
		case strings.Contains(string(x.OracleBody), `"stream"`):
			t.Errorf("op %d: the oracle's body is streamed: %s", x.ID, x.OracleBody)
		case x.Stream != strings.Contains(string(x.Body), `"stream":true`):
			t.Errorf("op %d: Stream %v but body %s", x.ID, x.Stream, x.Body)
		}
	}
	if !differ {
		t.Error("another seed gave the same mixture")
	}
	for k := range nKinds {
		if kinds[k] < 50 {
			t.Errorf("kind %s: %d of 2000 ops", k, kinds[k])
		}
	}
	if via[-1] < 500 || via[0] < 200 || via[1] < 200 {
		t.Errorf("targets %v: want the router and both replicas", via)
	}
}

// TestChatSessionsExtend: a session's next turn starts with the previous turn's messages, so
// its prompt extends the previous prompt (the cache's agent pattern).
func TestChatSessionsExtend(t *testing.T) {
	g := NewGenerator(DefaultMix(3, 1, false))
	var earlier [][]json.RawMessage
	extended := 0
	for range 500 {
		op := g.Next()
		if op.Kind != Chat {
			continue
		}
		var req struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(op.OracleBody, &req); err != nil {
			t.Fatal(err)
		}
		for _, prev := range earlier {
			if len(prev) < len(req.Messages) && fmt.Sprint(prev) == fmt.Sprint(req.Messages[:len(prev)]) {
				extended++
				break
			}
		}
		earlier = append(earlier, req.Messages)
	}
	if extended < 50 {
		t.Errorf("%d chat turns extend an earlier turn", extended)
	}
}

func TestSchedule(t *testing.T) {
	all, _ := ParseFaults("all")
	s := Schedule(5, 4000, 3, 4, all)
	if len(s) != 4*len(all) {
		t.Fatalf("%d faults, want %d", len(s), 4*len(all))
	}
	count := map[FaultKind]int{}
	for i, f := range s {
		count[f.Kind]++
		if f.At < 0 || f.At >= 4000 || (i > 0 && f.At < s[i-1].At) || f.Replica < 0 || f.Replica >= 3 {
			t.Errorf("fault %s out of order or range", f)
		}
		if f.Kind.Lasting() != (f.Until > f.At) {
			t.Errorf("fault %s: lasting %v", f, f.Kind.Lasting())
		}
	}
	for _, k := range all {
		if count[k] != 4 {
			t.Errorf("%s: %d times, want 4", k, count[k])
		}
	}
	if fmt.Sprint(Schedule(5, 4000, 3, 4, all)) != fmt.Sprint(s) {
		t.Error("the schedule is not seeded")
	}
	if _, err := ParseFaults("kill9,nope"); err == nil {
		t.Error("an unknown fault parsed")
	}
	if got, _ := ParseFaults("kill9, redis_slow"); fmt.Sprint(got) != "[kill9 redis_slow]" {
		t.Errorf("ParseFaults = %v", got)
	}
}

func TestJudge(t *testing.T) {
	j := NewJudge()
	op := func(id int, k Kind) *Op {
		o := &Op{ID: id, Kind: k, OracleBody: []byte("{}")}
		if k == Cancel {
			o.OracleBody = nil
		}
		return o
	}
	j.Record(Outcome{Op: op(1, Completion), Status: Answered, Answer: "a", Attempts: 1, Prompt: 10, Cached: 8}, "a")
	j.Record(Outcome{Op: op(2, Chat), Status: Answered, Answer: "b", Attempts: 3, Errors: []string{"status 503: x", "transport: y"}, Cached: -1}, "c")
	j.Record(Outcome{Op: op(3, Cancel), Status: Cancelled, Attempts: 1}, "")
	j.Record(Outcome{Op: op(4, Stream), Status: Lost, Attempts: 9, Errors: []string{"truncated stream: EOF"}}, "")
	j.AddCheck(Check{Name: "budget", OK: true})
	r := j.Report()
	if r.Requests != 4 || r.Answered != 2 || r.Judged != 2 || r.Wrong != 1 || r.Lost != 1 || r.Cancelled != 1 || r.Retried != 2 || r.CachedTokens != 8 {
		t.Errorf("report %+v", r)
	}
	if r.RetryReasons["status 503"] != 1 || r.RetryReasons["truncated stream"] != 1 || r.OK() {
		t.Errorf("reasons %v, ok %v", r.RetryReasons, r.OK())
	}
	if s := r.String(); !strings.Contains(s, "soak FAIL") || !strings.Contains(s, `got "b", oracle "c"`) {
		t.Errorf("report text:\n%s", s)
	}
	ok := NewJudge()
	ok.Record(Outcome{Op: op(1, Completion), Status: Answered, Answer: "a"}, "a")
	ok.AddCheck(Check{Name: "leak", OK: false})
	if ok.Report().OK() {
		t.Error("a failed check passed the run")
	}
}

func TestReadStream(t *testing.T) {
	for _, c := range []struct {
		name, in string
		chat     bool
		want     string
		err      string
	}{
		{"completion", "data: {\"choices\":[{\"text\":\"ab\"}]}\n\ndata: {\"choices\":[{\"text\":\"c\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n", false, "abc", ""},
		{"tool call deltas", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n", true, "\x00f({\"a\":1})", ""},
		{"truncated", "data: {\"choices\":[{\"text\":\"ab\"}]}\n\n", false, "", "truncated stream"},
		{"no finish", "data: {\"choices\":[{\"text\":\"ab\"}]}\n\ndata: [DONE]\n\n", false, "", "without a finish_reason"},
		{"error event", "data: {\"error\":{\"message\":\"boom\"}}\n\n", false, "", "stream error event"},
		{"garbage", "data: {nope\n\n", false, "", "malformed stream"},
	} {
		a, err := readStream(strings.NewReader(c.in), c.chat)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || a.text != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, a.text, err, c.want)
		}
	}
	if a, _ := readStream(strings.NewReader("data: {\"choices\":[{\"text\":\"x\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n"), false); a.cached != 4 || a.prompt != 5 {
		t.Errorf("usage: %+v", a)
	}
	if a, _ := readStream(strings.NewReader("data: {\"choices\":[{\"text\":\"x\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5}}\n\ndata: [DONE]\n\n"), false); a.cached != -1 {
		t.Errorf("cached_tokens missing must read as not reported (-1), got %d", a.cached)
	}
}

func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\",\"tool_calls\":[{\"index\":3}]},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n"), true)
	f.Add([]byte("data: {\"choices\":[{\"text\":\"ab\"}]}\n\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, chat bool) {
		readStream(strings.NewReader(string(b)), chat) // must not panic
		parseAnswer(b, chat)
	})
}

// TestClientRetries: 503s and a cut stream are retried; a 400 is not; the budget bounds it.
func TestClientRetries(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		switch {
		case r.URL.Path == "/bad":
			http.Error(w, `{"error":{"message":"no"}}`, 400)
		case n == 1:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", 503)
		case n == 2:
			w.Write([]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\n")) // cut before [DONE]
		default:
			w.Write([]byte("data: {\"choices\":[{\"text\":\"ok\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
		}
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Budget: 10 * time.Second}
	out := c.Do(context.Background(), &Op{Kind: Stream, Stream: true, Path: "/v1/completions", Body: []byte("{}")}, srv.URL)
	if out.Status != Answered || out.Answer != "ok" || out.Attempts != 3 || len(out.Errors) != 2 {
		t.Errorf("outcome %+v", out)
	}
	out = c.Do(context.Background(), &Op{Kind: Completion, Path: "/bad", Body: []byte("{}")}, srv.URL)
	if out.Status != Lost || out.Attempts != 1 {
		t.Errorf("a 400 outcome %+v; want lost after one try", out)
	}
	down := &Client{HTTP: srv.Client(), Budget: 300 * time.Millisecond}
	out = down.Do(context.Background(), &Op{Kind: Completion, Path: "/v1/completions", Body: []byte("{}")}, "http://127.0.0.1:1")
	if out.Status != Lost || out.Attempts < 2 {
		t.Errorf("unreachable server: %+v; want lost after retries within the budget", out)
	}
}

// TestProxies: the TCP proxy forwards and delays; the events proxy cuts /v1/kv-events streams
// and passes everything else.
func TestProxies(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	defer ln.Close()
	p, err := NewTCPProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(5 * time.Millisecond)
	fmt.Fprintf(c, "ping\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("echo through the proxy: %q, %v", line, err)
	}
	c.Close()

	events := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/kv-events" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			close(events)
			<-r.Context().Done()
			return
		}
		w.Write([]byte("hello"))
	}))
	defer up.Close()
	ep, err := NewEventsProxy(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	resp, err := http.Get(ep.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello" {
		t.Errorf("through the events proxy: %q", b)
	}
	resp, err = http.Get(ep.URL() + "/v1/kv-events")
	if err != nil {
		t.Fatal(err)
	}
	<-events
	if n := ep.DropEvents(); n != 1 {
		t.Errorf("dropped %d streams, want 1", n)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Log("stream ended cleanly") // either way it ended; what matters is that it did
	}
	resp.Body.Close()
}
