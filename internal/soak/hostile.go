package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"stockpot/internal/bytesize"
)

// The hostile soak (`stockpot soak --hostile`): every shape of the 2026-12-07 probe sent at
// once, by clients with no key, to one serve; the kernel's high-water mark of its resident
// memory (VmHWM) is then judged against the bound README states:
//
//	--kv-memory + the model file + --host-cache + --request-memory + --responses-store-bytes
//	+ --grammar-memory + hostileBaseOverhead
//
// Each term is a budget the server enforces whatever clients send; the base is what does
// not scale with them (the runtime, goroutine stacks of the connections, the tokenizer's
// tables). The shapes, each with the probe's sizes at Scale 1:
//   - responses-call-id: /v1/responses with a 7.5 MB function_call call_id, stored (the
//     probe took a 256 MiB server to 10.5 GB with 383 of them);
//   - grammar-anyof: an 800 KB 2,000-way anyOf of objects through chat response_format,
//     Responses text.format and Messages tools, 16 at once (6.2–12.4 GB);
//   - tokenize-spaces: 4 MiB of spaces to /tokenize, 10 at once (8.9 GB on kimi-k3);
//   - big-bodies: 15 MiB chat bodies, 32 at once (bounded by --request-memory);
//   - half-headers: 4,110 connections that send half a header and wait, from another
//     loopback address than the other clients (a per-client connection limit tells them
//     apart), while /health is asked every 100 ms from the legitimate address.
//
// It also checks the server is whole afterwards: /health answers, and a small completion is
// served. Nothing here is a timed assertion: the report states the /health latencies seen,
// and judges memory and liveness only.

// hostileBaseOverhead is the part of the bound that no client controls: the Go runtime and
// its collector's headroom over the live heap, the stacks of thousands of open connections
// (8 KiB each at least) and the tokenizer's and model's tables beside the weights.
const hostileBaseOverhead = 768 << 20

// HostileConfig is one hostile run.
type HostileConfig struct {
	Bin   string   // the stockpot binary
	Model string   // --model
	Dir   string   // logs
	Args  []string // more serve flags (--kv-memory etc. are read from here for the bound)
	// Scale multiplies the probe's counts (1 = the probe's; the CI test runs a fraction).
	Scale    float64
	Progress io.Writer
}

// ShapeResult is what one hostile shape got back.
type ShapeResult struct {
	Name     string         `json:"name"`
	Sent     int            `json:"sent"`
	Bytes    int64          `json:"bytes"`
	Statuses map[string]int `json:"statuses"` // HTTP status (or "error: ...") -> count
	// Samples holds the start of the first answer of each status, for the report.
	Samples map[string]string `json:"samples"`
}

// HostileReport is the run's outcome.
type HostileReport struct {
	Shapes        []ShapeResult `json:"shapes"`
	PeakRSS       int64         `json:"peak_rss_bytes"` // VmHWM
	EndRSS        int64         `json:"end_rss_bytes"`  // VmRSS after the run
	Bound         int64         `json:"bound_bytes"`
	BoundTerms    []string      `json:"bound_terms"`
	HealthAsked   int           `json:"health_asked"`
	HealthFailed  int           `json:"health_failed"`
	HealthMaxWait time.Duration `json:"health_max_wait_ns"`
	HealthP50     time.Duration `json:"health_p50_ns"`
	Alive         bool          `json:"alive"` // /health and a completion answered after the run
	AliveDetail   string        `json:"alive_detail,omitempty"`
}

// OK: the peak stayed within the bound and the server is whole.
func (r HostileReport) OK() bool { return r.Alive && r.PeakRSS > 0 && r.PeakRSS <= r.Bound }

func (r HostileReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hostile soak:\n")
	for _, s := range r.Shapes {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range s.Statuses {
				if !yield(k) {
					return
				}
			}
		})
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s×%d", k, s.Statuses[k]))
		}
		fmt.Fprintf(&b, "  %-18s %5d sent, %8s: %s\n", s.Name, s.Sent, mib(float64(s.Bytes)), strings.Join(parts, " "))
		for _, k := range keys {
			if v := s.Samples[k]; v != "" {
				fmt.Fprintf(&b, "      %s: %s\n", k, v)
			}
		}
	}
	fmt.Fprintf(&b, "  /health during the flood: %d asked, %d failed, median %v, slowest %v\n", r.HealthAsked, r.HealthFailed, r.HealthP50.Round(time.Millisecond), r.HealthMaxWait.Round(time.Millisecond))
	fmt.Fprintf(&b, "  peak RSS (VmHWM) %s, at the end %s; bound %s = %s\n", mib(float64(r.PeakRSS)), mib(float64(r.EndRSS)), mib(float64(r.Bound)), strings.Join(r.BoundTerms, " + "))
	verdict := "within the bound"
	if r.PeakRSS > r.Bound {
		verdict = "OVER THE BOUND"
	}
	fmt.Fprintf(&b, "  %s; alive after: %v %s\n", verdict, r.Alive, r.AliveDetail)
	return b.String()
}

// flagValue is the value of --name in args ("" when absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// hostileBound is the memory bound for a serve started with args, and its terms for the report.
func hostileBound(args []string, modelBytes int64) (int64, []string) {
	total := int64(0)
	var terms []string
	add := func(name, value, def string) {
		if value == "" {
			value = def
		}
		n, err := bytesize.Parse(value)
		if err != nil || n < 0 {
			n = 0
		}
		total += n
		terms = append(terms, fmt.Sprintf("%s %s", name, mib(float64(n))))
	}
	add("kv-memory", flagValue(args, "kv-memory"), "1GiB")
	total += modelBytes
	terms = append(terms, "model "+mib(float64(modelBytes)))
	add("host-cache", flagValue(args, "host-cache"), "0")
	add("request-memory", flagValue(args, "request-memory"), "1GiB")
	add("responses-store", flagValue(args, "responses-store-bytes"), "64MiB")
	add("grammar-memory", flagValue(args, "grammar-memory"), "256MiB")
	total += hostileBaseOverhead
	terms = append(terms, "base "+mib(hostileBaseOverhead))
	return total, terms
}

// procStatusField reads a "Name:   N kB" field of /proc/PID/status, in bytes.
func procStatusField(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// hostileSchema is a JSON schema of an n-way anyOf of objects, each with its own property
// names: the grammar it compiles to grows with every branch.
func hostileSchema(n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"object","properties":{"field_%d_alpha":{"type":"string","pattern":"^[a-z]{1,%d}$"},"field_%d_beta":{"type":"integer","minimum":%d,"maximum":%d},"field_%d_gamma":{"enum":["x%d","y%d","z%d"]}},"required":["field_%d_alpha","field_%d_beta"],"additionalProperties":false}`,
			i, 8+i%16, i, i, i*1000+999, i, i, i, i, i, i)
	}
	b.WriteString(`]}`)
	return json.RawMessage(b.String())
}

// hostileBodies are the request bodies of each shape (path, body), built once.
type hostileShape struct {
	name   string
	count  int // requests in all
	conc   int // at once
	bodies func(i int) (path string, body []byte)
}

func hostileShapes(scale float64, model string) []hostileShape {
	n := func(x int) int { return max(1, int(float64(x)*scale)) }
	callID := bytes.Repeat([]byte("c"), 7_500_000)
	respBody, _ := json.Marshal(map[string]any{
		"input": []any{
			map[string]any{"role": "user", "content": "call the tool"},
			map[string]any{"type": "function_call", "call_id": string(callID), "name": "lookup", "arguments": "{}"},
			map[string]any{"type": "function_call_output", "call_id": string(callID), "output": "done"},
		},
		"store": true, "max_output_tokens": 4,
	})
	schema := hostileSchema(2000)
	chatSchema, _ := json.Marshal(map[string]any{
		"messages":        []any{map[string]any{"role": "user", "content": "answer"}},
		"max_tokens":      4,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema, "strict": true}},
	})
	respSchema, _ := json.Marshal(map[string]any{
		"input": "answer", "max_output_tokens": 4,
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "x", "schema": schema, "strict": true}},
	})
	msgTools, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": 4,
		"messages":    []any{map[string]any{"role": "user", "content": "answer"}},
		"tools":       []any{map[string]any{"name": "x", "input_schema": schema}},
		"tool_choice": map[string]any{"type": "any"},
	})
	spaces, _ := json.Marshal(map[string]any{"prompt": strings.Repeat(" ", 4<<20)})
	big, _ := json.Marshal(map[string]any{
		"messages":   []any{map[string]any{"role": "user", "content": strings.Repeat("stock pot ", 15<<20/10)}},
		"max_tokens": 4,
	})
	return []hostileShape{
		{name: "responses-call-id", count: n(383), conc: 8, bodies: func(int) (string, []byte) { return "/v1/responses", respBody }},
		{name: "grammar-anyof", count: n(48), conc: 16, bodies: func(i int) (string, []byte) {
			switch i % 3 {
			case 0:
				return "/v1/chat/completions", chatSchema
			case 1:
				return "/v1/responses", respSchema
			}
			return "/v1/messages", msgTools
		}},
		{name: "tokenize-spaces", count: n(40), conc: 10, bodies: func(int) (string, []byte) { return "/tokenize", spaces }},
		{name: "big-bodies", count: n(96), conc: 32, bodies: func(int) (string, []byte) { return "/v1/chat/completions", big }},
	}
}

// RunHostile starts one serve, sends every hostile shape at once with a flood of half-sent
// headers, and reports its peak memory against the bound.
func RunHostile(ctx context.Context, cfg HostileConfig) (HostileReport, error) {
	var rep HostileReport
	if cfg.Scale <= 0 {
		cfg.Scale = 1
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	addr, err := freeAddr()
	if err != nil {
		return rep, err
	}
	args := append([]string{"serve", "--addr", addr, "--model", cfg.Model}, cfg.Args...)
	p := &Proc{Name: "hostile-serve", Path: cfg.Bin, Addr: addr, Health: "http://" + addr + "/health",
		LogTo: filepath.Join(cfg.Dir, "hostile-serve.log"), Args: args}
	if err := p.Start(ctx); err != nil {
		return rep, err
	}
	defer p.Term()
	base := "http://" + addr
	var modelBytes int64
	if st, err := os.Stat(cfg.Model); err == nil {
		modelBytes = st.Size()
	} else {
		modelBytes = procStatusField(p.Pid(), "VmRSS") // a synthetic model: what it holds at start
	}
	rep.Bound, rep.BoundTerms = hostileBound(cfg.Args, modelBytes)

	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	floodCtx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	var wg sync.WaitGroup
	// Half-sent headers from another loopback address, held until the shapes are done.
	halfN := max(1, int(4110*cfg.Scale))
	wg.Add(1)
	go func() {
		defer wg.Done()
		halfHeaders(floodCtx, addr, halfN)
	}()
	// /health every 100 ms from the legitimate address.
	healthDone := make(chan struct{})
	var waits []time.Duration
	go func() {
		defer close(healthDone)
		hc := &http.Client{Timeout: 30 * time.Second}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-floodCtx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			resp, err := hc.Get(base + "/health")
			wait := time.Since(start)
			rep.HealthAsked++
			if err != nil || resp.StatusCode != http.StatusOK {
				rep.HealthFailed++
			}
			if resp != nil {
				resp.Body.Close()
			}
			rep.HealthMaxWait = max(rep.HealthMaxWait, wait)
			waits = append(waits, wait)
		}
	}()
	shapes := hostileShapes(cfg.Scale, servedModel(ctx, client, base))
	results := make([]ShapeResult, len(shapes))
	var swg sync.WaitGroup
	for si, sh := range shapes {
		results[si] = ShapeResult{Name: sh.name, Statuses: map[string]int{}, Samples: map[string]string{}}
		var mu sync.Mutex
		next := 0
		for range sh.conc {
			swg.Add(1)
			go func() {
				defer swg.Done()
				for {
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					if i >= sh.count || ctx.Err() != nil {
						return
					}
					path, body := sh.bodies(i)
					status, sample := post(ctx, client, base+path, body)
					mu.Lock()
					if _, seen := results[si].Samples[status]; !seen {
						results[si].Samples[status] = sample
					}
					results[si].Sent++
					results[si].Bytes += int64(len(body))
					results[si].Statuses[status]++
					mu.Unlock()
				}
			}()
		}
		fmt.Fprintf(cfg.Progress, "hostile: %s: %d requests, %d at once\n", sh.name, sh.count, sh.conc)
	}
	swg.Wait()
	stopFlood()
	wg.Wait()
	<-healthDone
	if len(waits) > 0 {
		slices.Sort(waits)
		rep.HealthP50 = waits[len(waits)/2]
	}
	rep.Shapes = append(rep.Shapes, results...)
	rep.Shapes = append(rep.Shapes, ShapeResult{Name: "half-headers", Sent: halfN, Statuses: map[string]int{"held": halfN}})
	pid := p.Pid()
	rep.PeakRSS = procStatusField(pid, "VmHWM")
	rep.EndRSS = procStatusField(pid, "VmRSS")
	rep.Alive, rep.AliveDetail = alive(ctx, client, base)
	return rep, nil
}

// post sends one request and returns its status and the start of its answer.
func post(ctx context.Context, c *http.Client, url string, body []byte) (string, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "error: " + err.Error(), ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		return "error: " + errClass(err), ""
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode), strings.ToValidUTF8(string(head), "?")
}

// servedModel is the id /v1/models names first ("" if it cannot be read).
func servedModel(ctx context.Context, c *http.Client, base string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	resp, err := c.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&out) != nil || len(out.Data) == 0 {
		return ""
	}
	return out.Data[0].ID
}

// errClass is a short name for a client error, so the report's histogram stays small.
func errClass(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset", "EOF", "timeout", "refused", "broken pipe"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// halfHeaders opens n connections from 127.0.0.66 that each send half a request header and
// wait; a connection the server closes is opened again a second later, until ctx ends.
func halfHeaders(ctx context.Context, addr string, n int) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 66)}, Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256) // dials in flight
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sem <- struct{}{}
				c, err := d.DialContext(ctx, "tcp", addr)
				<-sem
				if err != nil {
					select {
					case <-ctx.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				_, _ = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
				done := make(chan struct{})
				go func() { _, _ = io.Copy(io.Discard, c); close(done) }()
				select {
				case <-ctx.Done():
				case <-done: // the server closed it (refused, or its header time ran out)
				}
				c.Close()
				select { // and open another a second later, as the probe's attack repeated
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	wg.Wait()
}

// alive checks the server after the run: /health and a small completion answered.
func alive(ctx context.Context, c *http.Client, base string) (bool, string) {
	resp, err := c.Get(base + "/health")
	if err != nil {
		return false, "health: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("health: %d", resp.StatusCode)
	}
	body := []byte(`{"prompt":"In a shared kitchen, one pot of stock serves every order.","max_tokens":4,"temperature":0}`)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err = c.Do(req)
	if err != nil {
		return false, "completion: " + err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		return false, fmt.Sprintf("completion: %d %v", resp.StatusCode, err)
	}
	return true, ""
}
