package redis

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// BenchmarkRestore measures what the remote tier costs and how fast it gives a prefix back,
// per block shape:
//   - redis_B/token: Redis's used_memory grown by writing the prefix, over its tokens;
//   - record_B/token: the records' own bytes over the tokens (the floor);
//   - overhead_%: redis_B over record_B, minus 100 (keys, expiries, allocator rounding);
//   - MB/s (SetBytes): one Get of the whole prefix, records bytes per second;
//   - memcpy_MB/s and x_memcpy: a copy of the same bytes, timed in the same run, and the
//     restore's throughput as a fraction of it.
//
// Four ways to keep the blocks: "store" is the tier itself (a key per block, Put and Get,
// pin records read and the TTLs refreshed in the read's round trip); "store-norefresh" is it
// with NoReadRefresh (pin records read, no refresh script); "key" is the same keys
// written and read raw (SET, one MGET: what a key per block costs with no pins and no
// refresh); "group8" puts 8 consecutive records under one key (one SET per 8 blocks, one
// MGET of an eighth of the keys): what grouping blocks would save in memory and time.
func BenchmarkRestore(b *testing.B) {
	srv := startServer(&testing.T{})
	defer srv.kill()
	for _, sh := range []struct {
		name   string
		l      kvcache.Layout
		blocks int
	}{
		// tiny-llama-spm (the default model's family): 8 KiB of K/V a block.
		{"tiny-f32", kvcache.Layout{BlockSize: 16, Layers: 2, KVHeads: 2, HeadDim: 16, DType: kvcache.F32}, 256},
		// A 0.5B-class model (24 layers, 2 KV heads of 64, f16): 192 KiB a block.
		{"qwen05b-f16", kvcache.Layout{BlockSize: 16, Layers: 24, KVHeads: 2, HeadDim: 64, DType: kvcache.F16}, 128},
		// A 1B-class model (16 layers, 8 KV heads of 64, f16): 512 KiB a block.
		{"llama1b-f16", kvcache.Layout{BlockSize: 16, Layers: 16, KVHeads: 8, HeadDim: 64, DType: kvcache.F16}, 64},
	} {
		for _, way := range []string{"store", "store-norefresh", "key", "group8"} {
			b.Run(sh.name+"/"+way, func(b *testing.B) { benchRestore(b, srv, sh.l, sh.blocks, way) })
		}
	}
}

func benchRestore(b *testing.B, srv *server, l kvcache.Layout, n int, way string) {
	digest := randomDigest()
	s, err := Open(srv.url(), Config{IdentityDigest: digest, CallTimeout: time.Minute, NoReadRefresh: way == "store-norefresh"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.client.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	items := tiertest.Items(tiertest.Chain(digest, prefix.Root(digest[:], ""), l, n, 80))
	var recordBytes int64
	for _, it := range items {
		recordBytes += int64(len(it.Value))
	}
	before := usedMemory(b, s.client)
	read := writeBlocks(b, s, items, way)
	after := usedMemory(b, s.client)
	memcpy := memcpyRate(items, recordBytes)
	b.SetBytes(recordBytes)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if got := read(); got != recordBytes {
			b.Fatalf("read %d bytes, want %d", got, recordBytes)
		}
	}
	rate := float64(recordBytes) * float64(b.N) / time.Since(start).Seconds()
	// Reported after the loop: b.Loop's first call resets the timer, and with it the metrics.
	tokens := float64(n * l.BlockSize)
	b.ReportMetric(float64(after-before)/tokens, "redis_B/token")
	b.ReportMetric(float64(recordBytes)/tokens, "record_B/token")
	b.ReportMetric(100*float64(after-before)/float64(recordBytes)-100, "overhead_%")
	b.ReportMetric(memcpy/1e6, "memcpy_MB/s")
	b.ReportMetric(rate/memcpy, "x_memcpy")
}

// writeBlocks writes items the way named and returns a read of all of them that reports the
// bytes it got.
func writeBlocks(b *testing.B, s *Store, items []tier.Item, way string) func() int64 {
	keys := make([]tier.Key, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	switch way {
	case "store", "store-norefresh":
		for i := 0; i < len(items); i += 16 { // the writer's batches are small
			if err := s.Put(ctx, items[i:min(i+16, len(items))]); err != nil {
				b.Fatal(err)
			}
		}
		return func() int64 {
			vals, err := s.Get(ctx, keys)
			if err != nil {
				b.Fatal(err)
			}
			return total(vals)
		}
	case "key", "group8":
		g := 1
		if way == "group8" {
			g = 8
		}
		var names []string
		for i := 0; i < len(items); i += g {
			var v []byte
			for _, it := range items[i:min(i+g, len(items))] {
				v = append(v, it.Value...)
			}
			names = append(names, s.key(items[i].Key))
			if err := s.client.Set(ctx, names[len(names)-1], v, s.cfg.TTL).Err(); err != nil {
				b.Fatal(err)
			}
		}
		return func() int64 {
			vals, err := s.client.MGet(ctx, names...).Result()
			if err != nil {
				b.Fatal(err)
			}
			out := make([][]byte, len(vals))
			for i, v := range vals {
				if str, ok := v.(string); ok {
					out[i] = []byte(str)
				}
			}
			return total(out)
		}
	}
	b.Fatalf("no way %q", way)
	return nil
}

func total(vals [][]byte) int64 {
	var n int64
	for _, v := range vals {
		n += int64(len(v))
	}
	return n
}

// usedMemory is INFO memory's used_memory, after Redis has let go of its clients' query
// buffers of the writes (they shrink when idle, within a second or two of clientsCron).
func usedMemory(b *testing.B, c goredis.UniversalClient) int64 {
	var last int64 = -1
	for range 50 { // until it settles: two equal readings 100 ms apart
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		m := infoField(info, "used_memory")
		if m == last {
			return m
		}
		last = m
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// memcpyRate is bytes per second of copying the records into one buffer, the peer of a
// restore measured in the same run.
func memcpyRate(items []tier.Item, size int64) float64 {
	dst := make([]byte, size)
	const rounds = 20
	start := time.Now()
	for range rounds {
		off := 0
		for _, it := range items {
			off += copy(dst[off:], it.Value)
		}
	}
	d := time.Since(start)
	if !bytes.Equal(dst[:len(items[0].Value)], items[0].Value) {
		panic(fmt.Sprint("memcpy baseline copied wrong bytes"))
	}
	return float64(size) * rounds / d.Seconds()
}
