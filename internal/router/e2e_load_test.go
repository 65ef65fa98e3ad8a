package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestFleetTwoRoutersSeeOneLoad: two routers front one real replica. A long generation sent
// through router A shows on router B as the replica reports it (B's own count is 0: without
// the replica's load line B would see an idle replica), both read the same running count,
// and both see it end when the client goes away. Conditions are polled until they hold, never
// timed: the generation is thousands of tokens long and is cancelled once both have seen it.
func TestFleetTwoRoutersSeeOneLoad(t *testing.T) {
	rs := startReplicas(t, 1)
	rtA, urlA := startRouter(t, "kv-aware", rs, nil)
	rtB, _ := startRouter(t, "kv-aware", rs, nil)
	a, b := backendByURL(t, rtA, rs[0].url), backendByURL(t, rtB, rs[0].url)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"prompt": "Count slowly to ten thousand:", "max_tokens": 7000,
		"ignore_eos": true, "temperature": 0, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urlA+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n') // the first token is out: it runs
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first SSE line %q: %v", line, err)
	}
	running := func(st BackendStatus) int {
		if st.Replica == nil {
			return -1
		}
		return st.Replica.Running + st.Replica.Waiting
	}
	waitUntil(t, "both routers read the replica's one running request", func() bool {
		sa, sb := a.status(), b.status()
		return running(sa) == 1 && running(sb) == 1 &&
			sa.Load == 1 && sa.Replica.Load == 1 && sa.Replica.Others == 0 && // A's own request, counted once
			sb.Load == 0 && sb.Replica.Load == 1 && sb.Replica.Others == 1 // another router's, seen by B
	})
	if got, want := b.policyLoad(), a.policyLoad(); got != want {
		t.Fatalf("router B's policy load %d, router A's %d: they read one replica", got, want)
	}
	cancel()
	waitUntil(t, "both routers read the replica idle again", func() bool {
		sa, sb := a.status(), b.status()
		return running(sa) == 0 && running(sb) == 0 && sa.Replica.Load == 0 && sb.Replica.Load == 0
	})
}
