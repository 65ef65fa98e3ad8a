package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
)

// waitRemoteWrites waits until inst's writer has written at least n blocks to the remote tier
// (its last tier here) and has none queued: a condition, not a duration, is what is asserted.
func waitRemoteWrites(t *testing.T, inst *instance, n uint64) offload.WriterStats {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st := inst.tiers.WriterStats()
		last := len(st.Written) - 1
		if st.Written[last] >= n && st.Queued[last] == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote writes: %+v, want %d written", st, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRedisWriteThroughWhileUp: under --remote-write through, replica A's computed blocks
// reach the shared Redis while A stays up (no eviction, no shutdown), and replica B restores
// the prefix from Redis at once. Under back, the same B finds nothing while A is up.
func TestRedisWriteThroughWhileUp(t *testing.T) {
	addr := startRedis(t)
	prompt := longText(1200)
	for _, tc := range []struct {
		pol    offload.WritePolicy
		salt   string // a fresh prefix per policy in the one Redis
		shared bool
	}{{offload.WriteThrough, "through ", true}, {offload.WriteBack, "back ", false}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			to := offload.Config{RemoteURL: "redis://" + addr + "/0", RemoteWrite: tc.pol, Remote: testRemote}
			instA, urlA, stopA := tieredInstance(t, "synthetic:tiny-llama-spm", to)
			defer stopA()
			a := completeText(t, urlA, tc.salt+prompt)
			aligned := (a.usage.PromptTokens - 1) / 16 * 16
			if tc.shared {
				st := waitRemoteWrites(t, instA, uint64(aligned/16))
				if st.Enqueued != 0 {
					t.Errorf("A wrote back %d blocks with nothing evicted", st.Enqueued)
				}
			} else if st := instA.tiers.WriterStats(); st.Through != 0 || st.Written[0] != 0 {
				t.Fatalf("write-back wrote before any eviction: %+v", st)
			}
			_, urlB, stopB := tieredInstance(t, "synthetic:tiny-llama-spm", to)
			defer stopB()
			b := completeText(t, urlB, tc.salt+prompt)
			want := 0
			if tc.shared {
				want = aligned
			}
			if got := b.usage.Cache["remote_tokens"]; got != want {
				t.Errorf("replica B with A up: remote tokens %d, want %d (%v)", got, want, b.usage.Cache)
			}
			if a.text != b.text {
				t.Errorf("outputs differ: %q vs %q", a.text, b.text)
			}
			m := scrape(t, urlA)
			if v, ok := m[`stockpot_kv_tier_write_failures_total{reason="queue_full",tier="remote"}`]; !ok || v != 0 {
				t.Errorf("queue_full failures on remote: %v (present %v), want 0", v, ok)
			}
		})
	}
}

// TestServeWriteFlags: a bad --remote-write or --max-offload-tokens is refused before
// anything loads.
func TestServeWriteFlags(t *testing.T) {
	for _, args := range [][]string{{"--remote-write", "sideways"}, {"--max-offload-tokens", "-1"}, {"--max-offload-tokens", "many"}} {
		err := cmdServe(args)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("serve %v: %v, want an error naming the flag", args, err)
		}
	}
}

// TestPromotionFromDisk: a prefix restored from disk is also put in host, so the next request
// for it, after the working pool evicted it, reads it from host. The second server's write
// admission (--offload-min-hits 5) keeps every eviction out of host: only promotion puts the
// prefix there.
func TestPromotionFromDisk(t *testing.T) {
	dir := t.TempDir()
	prompt := longText(1500)
	_, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm", offload.Config{DiskDir: dir, DiskBytes: 1 << 30})
	first := completeText(t, url, prompt)
	stop() // the working pool is written back to disk

	to := offload.Config{HostBytes: 64 << 20, DiskDir: dir, DiskBytes: 1 << 30, Admission: offload.Admission{MinHits: 5}}
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: 70 * 8192, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	defer func() { ts.Close(); inst.Close() }()
	restored := completeText(t, ts.URL, prompt)
	blocks := restored.usage.Cache["disk_tokens"] / 16
	if blocks == 0 {
		t.Fatalf("nothing restored from disk: %v", restored.usage.Cache)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for st := inst.tiers.WriterStats(); st.Written[0] < uint64(blocks); st = inst.tiers.WriterStats() {
		if time.Now().After(deadline) {
			t.Fatalf("promotions: %+v, want %d written to host", st, blocks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ { // push the prompt out of the working pool
		completeText(t, ts.URL, fmt.Sprint(i, longText(1500)))
	}
	if st := inst.tiers.WriterStats(); st.Enqueued != 0 {
		t.Fatalf("evictions were written back (%+v): the test needs host to get the prefix by promotion only", st)
	}
	again := completeText(t, ts.URL, prompt)
	if got := again.usage.Cache["host_tokens"]; got != blocks*16 {
		t.Errorf("after eviction: host tokens %d, want %d promoted (%v)", got, blocks*16, again.usage.Cache)
	}
	if again.text != first.text || restored.text != first.text {
		t.Errorf("outputs differ: %q, %q, %q", first.text, restored.text, again.text)
	}
}
