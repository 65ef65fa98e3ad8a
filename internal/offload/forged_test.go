package offload

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/kvtier"
	"stockpot/internal/portlock"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/redis"
	"stockpot/internal/tier/tiertest"
)

// startRedis starts a real redis-server on a loopback port this process holds and returns its
// URL. It fails, never skips, without the binary (`make test` and .ci install it).
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found in PATH (%v): install it (apt-get install redis-server)", err)
	}
	port, err := portlock.Port()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--loglevel", "warning")
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(3 * time.Minute); c.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server on %s not ready\n%s", addr, b)
		}
	}
	return "redis://" + addr + "/0"
}

func testKeys(t *testing.T, seeds ...byte) *tier.Keyring {
	t.Helper()
	var secrets [][]byte
	for _, s := range seeds {
		secrets = append(secrets, bytes.Repeat([]byte{s}, 32))
	}
	k, err := tier.NewKeyring(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedItems encodes recs signed by k (nil: unsigned) as store items.
func signedItems(t *testing.T, recs []*tier.Record, k *tier.Keyring) []tier.Item {
	t.Helper()
	items := make([]tier.Item, len(recs))
	for i, r := range recs {
		b, err := r.EncodeSigned(k)
		if err != nil {
			t.Fatal(err)
		}
		items[i] = tier.Item{Key: r.Key(), Value: b}
	}
	return items
}

// The probe's attack against a real disk directory and a real Redis: a self-consistent forged
// record (another prompt's K/V under the victim's key, hash, parent and tokens, its CRC
// rewritten) and a record signed by a key nobody configured are discarded and counted as
// forged, never restored; honest records restore, those signed by the old key among them
// after a new signing key was put in front of it (rotation). Without a key the same forgery
// is restored: the hole the MAC closes.
func TestForgedRecordsAreDiscarded(t *testing.T) {
	old, rotated, stranger := testKeys(t, 1), testKeys(t, 2, 1), testKeys(t, 9)
	stores := []struct {
		name string
		tier kvtier.Tier
		open func(t *testing.T) tier.Store
	}{
		{"disk", kvtier.Disk, func(t *testing.T) tier.Store {
			cfg := disk.DefaultConfig()
			cfg.Dir, cfg.IdentityDigest, cfg.CapacityBytes = t.TempDir(), identity, 64<<20
			s, err := disk.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", kvtier.Remote, func(t *testing.T) tier.Store {
			cfg := redis.DefaultConfig()
			cfg.IdentityDigest, cfg.CallTimeout = identity, 5*time.Second
			s, err := redis.Open(startRedis(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			tiers := []TierStore{{st.tier, s}}
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			f := newFetcher(t, tiers, m, func(c *FetcherConfig) { c.Keys = rotated })

			// Honest: blocks 0-1 signed before the rotation, 2-3 after it.
			honest := tiertest.Chain(identity, root, layout, 4, 71)
			if err := s.Put(ctx, append(signedItems(t, honest[:2], old), signedItems(t, honest[2:], rotated)...)); err != nil {
				t.Fatal(err)
			}
			req := request(honest)
			req.Into = destinations(len(honest))
			if res := fetch(t, f, req); res.Usable != 4 {
				t.Fatalf("honest chain: %d usable, want 4 (%+v)", res.Usable, res.Blocks)
			}
			for i, r := range honest {
				if !bytes.Equal(req.Into[i], r.KV) {
					t.Fatalf("honest block %d: restored K/V differs", i)
				}
			}

			// The victim's block 1 replaced by the forgery, written as an attacker with
			// write access to the store would.
			victim := tiertest.Chain(identity, root, layout, 3, 72)
			other := tiertest.Chain(identity, prefix.Root(identity[:], "another tenant"), layout, 2, 73)
			forgery := *victim[1]
			forgery.KV = other[1].KV
			items := signedItems(t, victim, rotated)
			items[1] = tier.Item{Key: victim[1].Key(), Value: tiertest.Encode(&forgery)}
			if err := s.Put(ctx, items); err != nil {
				t.Fatal(err)
			}
			// A chain whose first block a key nobody configured signed.
			foreign := tiertest.Chain(identity, root, layout, 1, 74)
			if err := s.Put(ctx, signedItems(t, foreign, stranger)); err != nil {
				t.Fatal(err)
			}
			req = request(victim)
			req.Into = destinations(len(victim))
			res := fetch(t, f, req)
			if res.Usable != 1 || res.Blocks[1].Record != nil || res.Blocks[1].Reason != tier.ReasonForged {
				t.Fatalf("victim chain: %d usable, block 1 reason %q (%v); want 1 usable, block 1 forged", res.Usable, res.Blocks[1].Reason, res.Blocks[1].Err)
			}
			if res := fetch(t, f, request(foreign)); res.Usable != 0 || len(res.Blocks) != 1 || res.Blocks[0].Reason != tier.ReasonForged {
				t.Fatalf("foreign key: %d usable, blocks %+v; want 0, forged", res.Usable, res.Blocks)
			}
			if got := counterValue(m.discarded.WithLabelValues(tier.ReasonForged)); got != 2 {
				t.Fatalf("stockpot_kv_blocks_discarded_total{reason=\"forged\"} = %v, want 2", got)
			}

			// No key configured: the forgery passes every other check and is restored.
			plain := newFetcher(t, tiers, nil, nil)
			if res := fetch(t, plain, request(victim)); res.Usable != 3 || !bytes.Equal(res.Blocks[1].Record.KV, other[1].KV) {
				t.Fatalf("without a key: %d usable, want the forgery restored (3)", res.Usable)
			}
		})
	}
}

// With Keys, the writer signs each block once for every tier: what reaches the disk (and, the
// bytes being shared, the host) verifies under the keys and carries the signing key's id; a
// fetcher with the keys restores it, through the host tier unchecked and the disk checked.
func TestWriterSignsWithKeys(t *testing.T) {
	keys := testKeys(t, 5)
	host, dsk := memstore.New(), memstore.New()
	tiers := []TierStore{{kvtier.Host, host}, {kvtier.Disk, dsk}}
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout, Keys: keys}, tiers, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := tiertest.Chain(identity, root, layout, 2, 81)
	for _, r := range recs {
		if !w.Enqueue(evicted(r, 1, 8), r.KV) {
			t.Fatal("block refused")
		}
	}
	w.Close()
	for _, s := range []tier.Store{host, dsk} {
		vals, err := s.Get(ctx, tiertest.Keys(recs))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want := tiertest.Want(recs[i])
			want.Keys = keys
			got, err := tier.DecodeVerify(v, want)
			if err != nil || !got.Signed || got.Sig.KeyID != keys.SigningID() {
				t.Fatalf("block %d: %v, signed %v", i, err, got != nil && got.Signed)
			}
		}
	}
	// Only on disk: the fetcher checks it there and restores it.
	host.Delete(ctx, tiertest.Keys(recs))
	f := newFetcher(t, tiers, nil, func(c *FetcherConfig) { c.Keys = keys })
	if res := fetch(t, f, request(recs)); res.Usable != 2 {
		t.Fatalf("%d usable, want 2", res.Usable)
	}
}
