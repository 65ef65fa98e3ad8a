package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/handoff"
	"stockpot/internal/server"
)

// handoffInstance is an in-process replica of role over model: 16-token blocks, a state
// checkpoint every 2 blocks (hybrids), the lease and buffers of serve's defaults scaled down.
func handoffInstance(t *testing.T, model string, role handoff.Role, peers ...string) (*instance, string) {
	t.Helper()
	o := serveOptions{model: model, threads: 1,
		engine: engine.Config{BlockSize: 16, KVMemory: 32 << 20, PrefixCache: true, Dedup: true, MaxBatchTokens: 64,
			MaxRunning: 16, Prefetch: engine.PrefetchWait, StateCheckpointBlocks: 2},
		handoff: handoffOptions{role: role, peers: peers, lease: 30 * time.Second, transferBytes: 64 << 20, streams: 2}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	t.Cleanup(func() { ts.Close(); inst.Close() })
	return inst, ts.URL
}

// genResult is a generation's text, token ids and usage.cache.
type genResult struct {
	Text   string
	IDs    []int32
	Cache  map[string]any
	KV     json.RawMessage
	Status int
	Body   string
}

// generate posts body to path at url (non-streamed) and reads the answer of either dialect.
func generate(t *testing.T, url, path string, body map[string]any) genResult {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	g := genResult{Status: resp.StatusCode, Body: raw.String()}
	if resp.StatusCode != 200 {
		return g
	}
	var r struct {
		Choices []struct {
			Text     string  `json:"text"`
			TokenIDs []int32 `json:"token_ids"`
			Message  struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Cache map[string]any `json:"cache"`
		} `json:"usage"`
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(raw.Bytes(), &r); err != nil {
		t.Fatalf("%s: %v: %s", path, err, raw.String())
	}
	g.Text, g.IDs, g.Cache, g.KV = r.Choices[0].Text+r.Choices[0].Message.Content, r.Choices[0].TokenIDs, r.Usage.Cache, r.KV
	return g
}

// handoffBody is body as vLLM's proxy sends it to the prefill replica.
func prefillBody(body map[string]any) map[string]any {
	p := map[string]any{}
	for k, v := range body {
		p[k] = v
	}
	p["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	p["stream"], p["max_tokens"] = false, 1
	return p
}

// handedOff runs body through the pair as vLLM's proxy does: the prefill answers with
// kv_transfer_params, which go into the same request to the decode.
func handedOff(t *testing.T, prefill, decode, path string, body map[string]any) (genResult, genResult) {
	t.Helper()
	p := generate(t, prefill, path, prefillBody(body))
	if p.Status != 200 || len(p.KV) == 0 || string(p.KV) == "null" {
		t.Fatalf("prefill %s: HTTP %d, kv_transfer_params %s: %s", path, p.Status, p.KV, p.Body)
	}
	d := map[string]any{}
	for k, v := range body {
		d[k] = v
	}
	d["kv_transfer_params"] = p.KV
	d["min_tokens"], d["min_completion_tokens"] = nil, nil // what the proxy adds back
	return p, generate(t, decode, path, d)
}

func num(m map[string]any, k string) int {
	f, _ := m[k].(float64)
	return int(f)
}

// TestHandoffBitwise: a prefill replica and a decode replica answer exactly as one replica
// does, for every architecture, greedy and seeded sampling, completions and chat (prompts
// that share no block, so each comes to the decode by transfer, not from its own cache); the
// decode's prompt came by transfer (usage.cache.transfer_tokens, a whole number of the
// model's reuse unit) and it computed only the tail.
func TestHandoffBitwise(t *testing.T) {
	prompt := strings.Repeat("The stock simmers on the back of the stove; every cook takes a ladle. ", 8)
	for _, model := range []string{"synthetic:tiny-llama-spm", "synthetic:tiny-qwen35", "synthetic:tiny-kimi-linear", "synthetic:tiny-kimi-k3"} {
		t.Run(model, func(t *testing.T) {
			_, both := handoffInstance(t, model, handoff.RoleBoth)
			_, prefill := handoffInstance(t, model, handoff.RolePrefill)
			_, decode := handoffInstance(t, model, handoff.RoleDecode, prefill)
			for i, tc := range []struct {
				path string
				body map[string]any
			}{
				{"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": true, "ignore_eos": true}},
				{"/v1/completions", map[string]any{"prompt": "Seeded: " + prompt, "max_tokens": 12, "temperature": 0.9, "top_p": 0.95, "seed": 11, "return_token_ids": true, "ignore_eos": true}},
				{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "Chat: " + prompt}}, "max_tokens": 10, "temperature": 0.7, "seed": 3, "return_token_ids": true, "ignore_eos": true}},
			} {
				want := generate(t, both, tc.path, tc.body)
				if want.Status != 200 {
					t.Fatalf("case %d on both: %d %s", i, want.Status, want.Body)
				}
				_, got := handedOff(t, prefill, decode, tc.path, tc.body)
				if got.Status != 200 {
					t.Fatalf("case %d on the decode: %d %s", i, got.Status, got.Body)
				}
				if got.Text != want.Text || fmt.Sprint(got.IDs) != fmt.Sprint(want.IDs) {
					t.Errorf("case %d: handed off %q %v, one replica %q %v", i, got.Text, got.IDs, want.Text, want.IDs)
				}
				tr, computed := num(got.Cache, "transfer_tokens"), num(got.Cache, "computed_tokens")
				if tr == 0 || tr%16 != 0 || computed >= tr {
					t.Errorf("case %d: usage.cache %v: want the prompt's blocks by transfer and only the tail computed", i, got.Cache)
				}
			}
			m := scrape(t, decode)
			if m[`stockpot_engine_prompt_tokens_total{source="transfer"}`] == 0 || m[`stockpot_kv_transfer_blocks_total{direction="pulled"}`] == 0 {
				t.Errorf("decode metrics: transfer tokens %v, pulled blocks %v", m[`stockpot_engine_prompt_tokens_total{source="transfer"}`],
					m[`stockpot_kv_transfer_blocks_total{direction="pulled"}`])
			}
			// Every transfer was taken whole: its lease ended, its blocks are cached unpinned.
			if p := scrape(t, prefill); p[`stockpot_kv_transfer_blocks_total{direction="served"}`] == 0 ||
				p[`stockpot_kv_transfer_leases`] != 0 || p[`stockpot_engine_pinned_blocks`] != 0 {
				t.Errorf("prefill: %v blocks served, %v transfers held, %v blocks pinned; want leases ended once taken",
					p[`stockpot_kv_transfer_blocks_total{direction="served"}`], p[`stockpot_kv_transfer_leases`], p[`stockpot_engine_pinned_blocks`])
			}
		})
	}
}

// TestHandoffBadInput: kv_transfer_params that are malformed, name an address that is not a
// configured peer, or ask the wrong role get a 4xx naming the field; a transfer that does
// not exist, or that is another tenant's (another salt), is computed on the decode instead
// (counted), with the answer one replica gives; the decode never pulls from a client's
// address.
func TestHandoffBadInput(t *testing.T) {
	const model = "synthetic:tiny-llama-spm"
	_, both := handoffInstance(t, model, handoff.RoleBoth)
	_, prefill := handoffInstance(t, model, handoff.RolePrefill)
	_, decode := handoffInstance(t, model, handoff.RoleDecode, prefill)
	prompt := strings.Repeat("A long prompt of many blocks for the handoff. ", 6)
	body := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true}
	p := generate(t, prefill, "/v1/completions", prefillBody(body))
	var kv map[string]any
	if err := json.Unmarshal(p.KV, &kv); err != nil {
		t.Fatal(err)
	}
	with := func(change map[string]any) map[string]any {
		k := map[string]any{}
		for a, b := range kv {
			k[a] = b
		}
		for a, b := range change {
			if b == nil {
				delete(k, a)
				continue
			}
			k[a] = b
		}
		d := map[string]any{}
		for a, b := range body {
			d[a] = b
		}
		d["kv_transfer_params"] = k
		return d
	}
	for _, tc := range []struct {
		name  string
		url   string
		body  map[string]any
		param string
	}{
		{"unknown field", decode, with(map[string]any{"remote_secret": 1}), "kv_transfer_params"},
		{"wrong type", decode, with(map[string]any{"remote_port": "80"}), "kv_transfer_params"},
		{"not a peer", decode, with(map[string]any{"remote_host": "10.1.2.3", "remote_port": 6379}), "kv_transfer_params.remote_host"},
		{"bad request id", decode, with(map[string]any{"remote_request_id": "../../v1/cache"}), "kv_transfer_params.remote_request_id"},
		{"both flags", decode, with(map[string]any{"do_remote_decode": true}), "kv_transfer_params"},
		{"decode asked to prefill", decode, prefillBody(body), "kv_transfer_params.do_remote_decode"},
		{"prefill asked to decode", prefill, with(nil), "kv_transfer_params.do_remote_prefill"},
		{"streamed prefill", prefill, func() map[string]any { b := prefillBody(body); b["stream"] = true; return b }(), "kv_transfer_params.do_remote_decode"},
	} {
		g := generate(t, tc.url, "/v1/completions", tc.body)
		var e struct {
			Error struct {
				Param   string `json:"param"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(g.Body), &e)
		if g.Status != 400 || e.Error.Param != tc.param {
			t.Errorf("%s: HTTP %d param %q (%s), want 400 naming %s", tc.name, g.Status, e.Error.Param, e.Error.Message, tc.param)
		}
	}
	want := generate(t, both, "/v1/completions", body)
	// A transfer that does not exist (or expired): the decode computes, the answer holds.
	gone := generate(t, decode, "/v1/completions", with(map[string]any{"remote_request_id": "xfer-nothing-here"}))
	if gone.Status != 200 || gone.Text != want.Text || num(gone.Cache, "transfer_tokens") != 0 {
		t.Errorf("missing transfer: HTTP %d %q %v, want %q computed", gone.Status, gone.Text, gone.Cache, want.Text)
	}
	// Another prompt of the same length under a transfer's params: not the prompt the prefill
	// computed (stockpot_prompt_digest), so the prefill's first token is not taken.
	ids := make([]int, 50)
	for i := range ids {
		ids[i] = 5 + (i*37)%300
	}
	idsBody := map[string]any{"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": true}
	idsP := generate(t, prefill, "/v1/completions", prefillBody(idsBody))
	changed := append([]int(nil), ids...)
	changed[len(changed)-1]++ // same length, last token differs
	swapped := map[string]any{"prompt": changed, "max_tokens": 6, "temperature": 0, "ignore_eos": true}
	wantSwapped := generate(t, both, "/v1/completions", swapped)
	swapped["kv_transfer_params"] = idsP.KV
	if got := generate(t, decode, "/v1/completions", swapped); got.Status != 200 || got.Text != wantSwapped.Text {
		t.Errorf("another prompt under a transfer's params: HTTP %d %q, want %q", got.Status, got.Text, wantSwapped.Text)
	}
	// Another salt (another tenant's namespace): the prefill refuses the pull (its root is
	// not the transfer's); the decode computes its own prompt.
	salted := with(nil)
	salted["cache_salt"] = "another-tenant"
	wantSalted := generate(t, both, "/v1/completions", func() map[string]any {
		b := with(nil)
		delete(b, "kv_transfer_params")
		b["cache_salt"] = "another-tenant"
		return b
	}())
	other := generate(t, decode, "/v1/completions", salted)
	if other.Status != 200 || other.Text != wantSalted.Text || num(other.Cache, "transfer_tokens") != 0 {
		t.Errorf("another tenant's transfer: HTTP %d %q %v, want %q and nothing transferred", other.Status, other.Text, other.Cache, wantSalted.Text)
	}
	if m := scrape(t, decode); m[`stockpot_kv_transfer_failures_total{reason="pull"}`] < 2 {
		t.Errorf("failed pulls counted %v, want 2", m[`stockpot_kv_transfer_failures_total{reason="pull"}`])
	}
	// The real transfer still works, on a decode that has not computed the prompt itself.
	_, fresh := handoffInstance(t, model, handoff.RoleDecode, prefill)
	if got := generate(t, fresh, "/v1/completions", with(nil)); got.Text != want.Text || num(got.Cache, "transfer_tokens") == 0 {
		t.Errorf("the transfer: %q %v, want %q by transfer", got.Text, got.Cache, want.Text)
	}
}

// peersDir is ../shared/peers beside the checkout, where vLLM's proxy is kept unchanged.
func peersDir(t *testing.T) string {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "shared", "peers")
}

// TestVLLMProxyDrivesPair: vLLM's own disaggregation proxy (../shared/peers, unchanged, on
// Debian's python3 with its FastAPI, httpx and uvicorn) in front of a Stockpot prefill and
// decode pair: completions and chat, whole and streamed, answer as one replica does.
func TestVLLMProxyDrivesPair(t *testing.T) {
	dir := peersDir(t)
	if _, err := os.Stat(filepath.Join(dir, "vllm_toy_proxy_server.py")); err != nil {
		t.Skipf("vLLM's proxy is not beside this checkout (%v): it lives in ../shared/peers", err)
	}
	const py = "/usr/bin/python3" // Debian's own: its python3-fastapi, -httpx and -uvicorn
	if err := exec.Command(py, "-c", "import fastapi, httpx, uvicorn").Run(); err != nil {
		t.Fatalf("Debian's python3-fastapi, python3-httpx and python3-uvicorn are needed (`make test` installs them): %v", err)
	}
	const model = "synthetic:tiny-llama-spm"
	_, both := handoffInstance(t, model, handoff.RoleBoth)
	_, prefill := handoffInstance(t, model, handoff.RolePrefill)
	_, decode := handoffInstance(t, model, handoff.RoleDecode, prefill)
	hostPort := func(u string) (string, string) {
		hp := strings.TrimPrefix(u, "http://")
		i := strings.LastIndex(hp, ":")
		return hp[:i], hp[i+1:]
	}
	ph, pp := hostPort(prefill)
	dh, dp := hostPort(decode)
	addr := freePort(t)
	_, port := hostPort("http://" + addr)
	cmd := exec.Command(py, filepath.Join(dir, "run_vllm_proxy.py"), "--host", "127.0.0.1", "--port", port,
		"--prefiller-hosts", ph, "--prefiller-ports", pp, "--decoder-hosts", dh, "--decoder-ports", dp)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=unused")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	proxy := "http://" + addr
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(proxy + "/healthcheck"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not start: %s", logs.String())
		}
	}
	prompt := strings.Repeat("Through vLLM's proxy, a Stockpot pair. ", 10)
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": true}},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": prompt}}, "max_tokens": 10, "temperature": 0.8, "seed": 5, "ignore_eos": true}},
	} {
		want := generate(t, both, tc.path, tc.body)
		got := generate(t, proxy, tc.path, tc.body)
		if got.Status != 200 || got.Text != want.Text {
			t.Errorf("%s through the proxy: HTTP %d %q, one replica %q (%s)", tc.path, got.Status, got.Text, want.Text, got.Body)
		}
		if num(got.Cache, "transfer_tokens") == 0 {
			t.Errorf("%s through the proxy: usage.cache %v, want the prompt by transfer", tc.path, got.Cache)
		}
		stream := map[string]any{"stream": true}
		for k, v := range tc.body {
			stream[k] = v
		}
		if text := streamText(t, proxy+tc.path, stream); text != want.Text {
			t.Errorf("%s streamed through the proxy: %q, one replica %q", tc.path, text, want.Text)
		}
	}
	if t.Failed() {
		t.Logf("proxy log:\n%s", logs.String())
	}
}

// streamText posts a streamed request and joins its text deltas (either dialect).
func streamText(t *testing.T, url string, body map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(line), &c) == nil && len(c.Choices) > 0 {
			out.WriteString(c.Choices[0].Text + c.Choices[0].Delta.Content)
		}
	}
	return out.String()
}

// TestHandoffKeys: with --backend-key set the transfer endpoint takes it (or an admin key),
// and a decode that holds the same key pulls; without keys the endpoint is open.
func TestHandoffKeys(t *testing.T) {
	const model = "synthetic:tiny-llama-spm"
	keyed := func(role handoff.Role, peers ...string) string {
		o := serveOptions{model: model, threads: 1,
			engine:  engine.Config{BlockSize: 16, KVMemory: 32 << 20, PrefixCache: true, MaxBatchTokens: 64, MaxRunning: 8},
			server:  server.Config{BackendKey: "fleet-secret"},
			handoff: handoffOptions{role: role, peers: peers, lease: 30 * time.Second, transferBytes: 64 << 20, streams: 2}}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		t.Cleanup(func() { ts.Close(); inst.Close() })
		return ts.URL
	}
	prefill := keyed(handoff.RolePrefill)
	decode := keyed(handoff.RoleDecode, prefill)
	get := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, prefill+handoff.TransferPath+"xfer-none", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("a pull without the key: HTTP %d, want 401", code)
	}
	if code := get("wrong"); code != http.StatusUnauthorized {
		t.Errorf("a pull with a wrong key: HTTP %d, want 401", code)
	}
	if code := get("fleet-secret"); code != http.StatusNotFound {
		t.Errorf("a pull with the key, of an unknown transfer: HTTP %d, want 404", code)
	}
	body := map[string]any{"prompt": strings.Repeat("Keyed fleets hand off too. ", 8), "max_tokens": 5, "temperature": 0, "ignore_eos": true}
	_, got := handedOff(t, prefill, decode, "/v1/completions", body)
	if got.Status != 200 || num(got.Cache, "transfer_tokens") == 0 {
		t.Errorf("a keyed pair: HTTP %d usage %v, want the prompt by transfer", got.Status, got.Cache)
	}
	_, open := handoffInstance(t, model, handoff.RolePrefill)
	resp, err := http.Get(open + handoff.TransferPath + "xfer-none")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a keyless prefill's endpoint: HTTP %d, want 404 (open, the id unknown)", resp.StatusCode)
	}
}
