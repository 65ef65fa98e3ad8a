package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"stockpot/internal/soak"
)

// soakPatience is the tests' retry budget and settle timeout: on a busy machine a restarted
// replica or router can take far longer than the command's defaults to come back, and a
// request lost or a leak seen must be a defect, not a slow machine.
const soakPatience = 5 * time.Minute

// TestSoak is a short seeded run of `stockpot soak`: two replicas with host, disk and Redis
// tiers behind the router, every fault once, every completed greedy answer compared with the
// cache-off oracle. Nothing may be wrong or lost, the tiers stay within their budgets, no
// block stays referenced and the servers' goroutines come back down; the client side (this
// process) leaks no goroutine either. `stockpot soak --requests 10000` is the long run.
func TestSoak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bin := buildStockpot(t)
	all, _ := soak.ParseFaults("all")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // a watchdog
	defer cancel()
	var progress strings.Builder
	rep, err := soak.Run(ctx, soak.Config{
		Bin: bin, Model: "synthetic:tiny-qwen2", Dir: t.TempDir(), Requests: 360, Workers: 6, Seed: 1,
		Replicas: 2, Router: true, KVMemory: "768KiB", HostCache: "8MiB", Disk: true, DiskMount: "6m", Redis: true,
		Faults: all, Rounds: 1, Progress: &progress, RetryBudget: soakPatience, SettleTimeout: soakPatience,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s%s", progress.String(), rep)
	if !rep.OK() {
		t.Errorf("soak failed:\n%s", rep)
	}
	if rep.Judged < 200 {
		t.Errorf("%d answers judged, want most of 360", rep.Judged)
	}
	for _, k := range all {
		if k == soak.DiskFull && os.Geteuid() != 0 {
			continue // a full disk needs a tmpfs of its own, which needs root
		}
		if k.Handoff() {
			continue // TestSoakPD's
		}
		if rep.Faults[k.String()] == 0 {
			t.Errorf("fault %s was not injected: %v", k, rep.FaultErrors)
		}
	}
}

// TestSoakHybrid is the same for a hybrid model (tiny-qwen35: Gated DeltaNet layers whose
// recurrent state is checkpointed with the blocks): restores, corrupted files and restarts
// never give an answer resumed from an incomplete or damaged state.
func TestSoakHybrid(t *testing.T) {
	bin := buildStockpot(t)
	all, _ := soak.ParseFaults("all")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // a watchdog
	defer cancel()
	rep, err := soak.Run(ctx, soak.Config{
		Bin: bin, Model: "synthetic:tiny-qwen35", Dir: t.TempDir(), Requests: 150, Workers: 4, Seed: 3,
		Replicas: 2, Router: true, KVMemory: "8MiB", HostCache: "32MiB", Disk: true, DiskMount: "6m", Redis: true,
		Faults: all, Rounds: 1, RetryBudget: soakPatience, SettleTimeout: soakPatience,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if !rep.OK() || rep.Judged < 80 || rep.CachedTokens == 0 {
		t.Errorf("hybrid soak: ok %v, %d judged, %d cached tokens:\n%s", rep.OK(), rep.Judged, rep.CachedTokens, rep)
	}
}

// TestSoakPD is the prefill/decode soak, small: one prefill replica (behind the soak's
// transfer proxy) and two decode replicas sharing a Redis tier written through, 40% of the
// judged requests handed off as vLLM's proxy does it, every handoff fault twice (a prefill
// killed after it answered, a decode killed mid-pull, an expired lease, a flipped byte in the
// transfer stream) beside kill -9s of any replica and a slow Redis. Every completed answer,
// handed off or not, equals the cache-off oracle's; nothing is lost.
func TestSoakPD(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bin := buildStockpot(t)
	faults, err := soak.ParseFaults("pd_prefill_kill9,pd_decode_kill_pull,pd_lease_expire,pd_corrupt_transfer,kill9,redis_slow")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a watchdog
	defer cancel()
	var progress strings.Builder
	rep, err := soak.Run(ctx, soak.Config{
		Bin: bin, Model: "synthetic:tiny-qwen2", Dir: t.TempDir(), Requests: 200, Workers: 4, Seed: 2,
		Replicas: 3, PD: true, Prefills: 1, HandoffPercent: 40, HandoffLease: time.Second,
		KVMemory: "768KiB", HostCache: "8MiB", Redis: true,
		Faults: faults, Rounds: 2, Progress: &progress, RetryBudget: soakPatience, SettleTimeout: soakPatience,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s%s", progress.String(), rep)
	if !rep.OK() {
		t.Errorf("soak failed:\n%s", rep)
	}
	if rep.Handoffs < 30 || rep.TransferTokens == 0 {
		t.Errorf("%d handed-off requests answered, %d prompt tokens by transfer: want most of 40%% of 200 and the transfer path used", rep.Handoffs, rep.TransferTokens)
	}
	for _, k := range faults {
		if rep.Faults[k.String()] != 2 {
			t.Errorf("fault %s injected %d times, want 2: %v", k, rep.Faults[k.String()], rep.FaultErrors)
		}
	}
}
