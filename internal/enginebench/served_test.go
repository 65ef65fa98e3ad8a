package enginebench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"stockpot/internal/syncbuf"
)

// The served path: what a user of `stockpot serve` gets, measured beside the engine.
//
// The engine rows time the forward pass and the argmax. A user's tokens also cross the
// engine's scheduler and sampler, the detokenizer, the HTTP server and SSE, each token a
// chunk on the wire. servedDecode measures that: a `stockpot serve` process on the same
// file and thread count, one streamed completion (ignore_eos, greedy) at a time, tokens per
// second from the first chunk to the last as the client reads them.

var (
	servedBinOnce sync.Once
	servedBin     string
	servedBinErr  error
)

// stockpotBinary builds cmd/stockpot once per run ($STOCKPOT_BIN names a built one instead).
func stockpotBinary(b *testing.B) string {
	servedBinOnce.Do(func() {
		if servedBin = os.Getenv("STOCKPOT_BIN"); servedBin != "" {
			return
		}
		dir, err := os.MkdirTemp("", "enginebench-bin")
		if err != nil {
			servedBinErr = err
			return
		}
		servedBin = filepath.Join(dir, "stockpot")
		if out, err := exec.Command("go", "build", "-o", servedBin, "stockpot/cmd/stockpot").CombinedOutput(); err != nil {
			servedBinErr = fmt.Errorf("building stockpot: %v\n%s", err, out)
		}
	})
	if servedBinErr != nil {
		b.Fatal(servedBinErr)
	}
	return servedBin
}

// servedReplica is a `stockpot serve` on one model file.
type servedReplica struct {
	base string
	cmd  *exec.Cmd
	log  syncbuf.Buffer // read while serve still writes it
}

// startServed starts serve on path with the benchmark's threads; extra flags follow (the
// default K/V memory is 256 MiB).
func startServed(b *testing.B, path string, extra ...string) *servedReplica {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &servedReplica{base: "http://" + addr}
	args := append([]string{"serve", "--model", path, "--addr", addr, "--threads", fmt.Sprint(threads), "--kv-memory", "256MiB"}, extra...)
	s.cmd = exec.Command(stockpotBinary(b), args...)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(s.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				// Its own prefetch calibration (serve --calibrate), for the table's
				// notes beside the engine's: the two are measured minutes apart.
				for _, line := range strings.Split(s.log.String(), "\n") {
					if strings.Contains(line, "prefetch") {
						calibrations.Store("serve "+filepath.Base(path), strings.TrimPrefix(line, "stockpot: "))
					}
				}
				return s
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("serve on %s not healthy: %v\n%s", path, err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// decode streams one completion of n tokens after a short prompt (distinct per call: salt)
// and returns tokens per second between the first and the last chunk the client read.
func (s *servedReplica) decode(b *testing.B, n, salt int) float64 {
	b.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("Round %d. Count on: one two three", salt), "max_tokens": n,
		"ignore_eos": true, "temperature": 0, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	resp, err := http.Post(s.base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("served decode: HTTP %d", resp.StatusCode)
	}
	var first, last time.Time
	chunks, tokens := 0, 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Text string } `json:"choices"`
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			b.Fatalf("served decode: chunk %q: %v", line, err)
		}
		if c.Usage != nil {
			tokens = c.Usage.CompletionTokens
		}
		if len(c.Choices) > 0 {
			now := time.Now()
			if chunks == 0 {
				first = now
			}
			last = now
			chunks++
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if tokens != n || chunks < 2 {
		b.Fatalf("served decode: %d tokens in %d chunks, want %d tokens", tokens, chunks, n)
	}
	// The first chunk carries the first token (its time is TTFT's); the rest arrived after it.
	return float64(tokens-1) / last.Sub(first).Seconds()
}
