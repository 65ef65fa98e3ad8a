package crc32c

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// impls are the implementations this CPU runs: each test checks every one of them.
func impls() []impl {
	var out []impl
	for _, k := range []impl{implGeneric, implAVX512} {
		if supported(k) {
			out = append(out, k)
		}
	}
	return out
}

// TestImpls logs the paths under test, so a run on a CPU without AVX-512's VPCLMULQDQ says
// that it checked hash/crc32 only.
func TestImpls(t *testing.T) {
	t.Logf("active %v; tested %v", active, impls())
}

// clmul is the carry-less product of a and b as (low, high) quadwords: the oracle of
// PCLMULQDQ.
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if a>>i&1 != 0 {
			lo ^= b << i
			if i > 0 {
				hi ^= b >> (64 - i)
			}
		}
	}
	return lo, hi
}

// foldLane is the kernels' fold of one 128-bit lane (16 bytes) by the pair k, in Go.
func foldLane(lane []byte, k [2]uint64) []byte {
	l0, h0 := clmul(binary.LittleEndian.Uint64(lane), k[0])
	l1, h1 := clmul(binary.LittleEndian.Uint64(lane[8:]), k[1])
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, l0^l1), h0^h1)
}

// Every fold distance the kernels use moves a lane the way the CRC does: a lane X followed by
// d zero bits has the CRC of d zero bits followed by fold(X) (the same length, and X·x^d ≡
// fold(X) mod P), for random lanes. It recomputes foldK as well.
func TestFoldConstants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var want [12]uint64
	for i, d := range []int{2048, 512, 384, 256, 128} {
		p := foldPair(d)
		want[2*i], want[2*i+1] = p[0], p[1]
		zeros := make([]byte, d/8)
		for range 100 {
			lane := make([]byte, 16)
			for j := range lane {
				lane[j] = byte(r.Uint32())
			}
			a := append(append([]byte{}, lane...), zeros...)
			b := append(append([]byte{}, zeros...), foldLane(lane, p)...)
			if ca, cb := crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli); ca != cb {
				t.Fatalf("fold by %d bits of %x: CRC %08x, lane then zeros %08x", d, lane, cb, ca)
			}
		}
	}
	if foldK != want {
		t.Fatalf("foldK %x, want %x", foldK, want)
	}
}

// lengths are the input sizes checked at every alignment: the edges of each kernel's loops
// (16-, 64- and 256-byte steps, the minimum), a K/V block's size and a few random ones.
func lengths(r *rand.Rand) []int {
	n := []int{0, 1, 3, 15, 16, 17, 63, 64, 65, 200, minFold - 1, minFold, minFold + 1,
		255, 256, 257, 271, 272, 319, 320, 511, 512, 513, 1000, 4095, 4096, 4097, 65536, 65536 + 19}
	for range 8 {
		n = append(n, r.IntN(70000))
	}
	return n
}

// Update and UpdateCopy through every path agree with hash/crc32 on every length at every
// alignment 0..63 of source and destination, from non-zero initial CRCs; UpdateCopy writes
// exactly dst[:len(src)].
func TestUpdateMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const maxLen, guard = 70000 + 128, 64
	src := make([]byte, maxLen)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	dstBuf := make([]byte, maxLen+2*guard)
	for _, k := range impls() {
		t.Run(k.String(), func(t *testing.T) {
			for _, n := range lengths(r) {
				for align := range 64 {
					b := src[align : align+n]
					crc := r.Uint32()
					want := crc32.Update(crc, castagnoli, b)
					if got := update(k, crc, b); got != want {
						t.Fatalf("Update(%08x, %d bytes at +%d) = %08x, want %08x", crc, n, align, got, want)
					}
					for i := range dstBuf {
						dstBuf[i] = 0xA5
					}
					da := (align * 7) % 64 // a destination alignment unlike the source's
					dst := dstBuf[guard+da : guard+da+n+r.IntN(3)]
					if got := updateCopy(k, crc, dst, b); got != want {
						t.Fatalf("UpdateCopy(%08x, %d bytes at +%d to +%d) = %08x, want %08x", crc, n, align, da, got, want)
					}
					if !bytes.Equal(dst[:n], b) {
						t.Fatalf("UpdateCopy(%d bytes at +%d to +%d): copy differs", n, align, da)
					}
					for i, c := range dstBuf {
						if (i < guard+da || i >= guard+da+n) && c != 0xA5 {
							t.Fatalf("UpdateCopy(%d bytes at +%d to +%d) wrote byte %d outside dst[:%d]", n, align, da, i-guard-da, n)
						}
					}
				}
			}
		})
	}
}

// Chained updates over any split equal one update over the whole (the state carries across
// calls, through both kernels and hash/crc32's tails).
func TestUpdateChained(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	msg := make([]byte, 20000)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	want := crc32.Checksum(msg, castagnoli)
	for _, k := range impls() {
		for range 200 {
			var crc uint32
			for rest := msg; len(rest) > 0; {
				c := min(len(rest), r.IntN(3000))
				crc = update(k, crc, rest[:c])
				rest = rest[c:]
			}
			if crc != want {
				t.Fatalf("%v: chained %08x, want %08x", k, crc, want)
			}
		}
	}
}

func TestUpdateCopyShortDestinationPanics(t *testing.T) {
	for _, k := range impls() {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v: UpdateCopy into 1023 bytes of 1024 did not panic", k)
				}
			}()
			updateCopy(k, 0, make([]byte, 1023), make([]byte, 1024))
		}()
	}
}

func TestChecksum(t *testing.T) {
	// The check value of CRC-32C (RFC 3720 B.4's "123456789").
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("Checksum(123456789) = %08x, want e3069283", got)
	}
	b := bytes.Repeat([]byte{0xff}, 1<<16)
	if got, want := Checksum(b), crc32.Checksum(b, castagnoli); got != want {
		t.Fatalf("Checksum(64 KiB of ff) = %08x, want %08x", got, want)
	}
}

// FuzzUpdate: arbitrary bytes at an arbitrary offset and initial CRC, through every path and
// UpdateCopy, against hash/crc32.
func FuzzUpdate(f *testing.F) {
	f.Add([]byte("123456789"), uint32(0), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 300), uint32(0xffffffff), uint8(3))
	f.Add(bytes.Repeat([]byte("stockpot"), 600), uint32(0x12345678), uint8(17))
	f.Fuzz(func(t *testing.T, data []byte, crc uint32, off uint8) {
		b := data[min(int(off)%64, len(data)):]
		want := crc32.Update(crc, castagnoli, b)
		for _, k := range impls() {
			if got := update(k, crc, b); got != want {
				t.Fatalf("%v: Update(%08x, %d bytes) = %08x, want %08x", k, crc, len(b), got, want)
			}
			dst := make([]byte, len(b)+1)
			if got := updateCopy(k, crc, dst, b); got != want || !bytes.Equal(dst[:len(b)], b) || dst[len(b)] != 0 {
				t.Fatalf("%v: UpdateCopy(%08x, %d bytes) = %08x, want %08x, or copied wrongly", k, crc, len(b), got, want)
			}
		}
	})
}

var sink uint32

// BenchmarkUpdate: MB/s of each path and of hash/crc32 called directly, per input size.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{256, 1 << 10, 4 << 10, 64 << 10, 1 << 20} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		b.Run(fmt.Sprintf("%d/stdlib", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink = crc32.Update(sink, castagnoli, buf)
			}
		})
		for _, k := range impls()[1:] {
			b.Run(fmt.Sprintf("%d/%v", n, k), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					sink = update(k, sink, buf)
				}
			})
		}
	}
}

// BenchmarkUpdateCopy: MB/s of UpdateCopy per path and of copy() of the same bytes. (From 1
// MiB on, copy() stores around the cache: BenchmarkUpdateCopyVsCopy compares them on
// restore-sized blocks.)
func BenchmarkUpdateCopy(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 512 << 10} {
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i * 7)
		}
		b.Run(fmt.Sprintf("%d/copy", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
		for _, k := range impls() {
			b.Run(fmt.Sprintf("%d/%v", n, k), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					sink = updateCopy(k, sink, dst, src)
				}
			})
		}
	}
}

// BenchmarkUpdateCopyVsCopy: UpdateCopy against copy() over a host restore's shape, 32
// blocks of 512 KiB (16 MiB, past the L2), the source at a 64-byte boundary (+0) or 32 bytes
// past one (+32, where a record's K/V starts), alternating the two each round. It reports
// copy_time/update_copy_time (1.0 = as fast as copy) over the median rounds and the fastest,
// the figures a shared machine disturbs least.
func BenchmarkUpdateCopyVsCopy(b *testing.B) {
	const blockBytes, blocks, stride = 512 << 10, 32, 512<<10 + 256
	src, dst := make([]byte, blocks*stride), make([]byte, blocks*blockBytes)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, k := range impls() {
		for _, skew := range []int{0, 32} {
			b.Run(fmt.Sprintf("%v/+%d", k, skew), func(b *testing.B) {
				var tc, tu []time.Duration
				for b.Loop() {
					t0 := time.Now()
					for i := range blocks {
						copy(dst[i*blockBytes:(i+1)*blockBytes], src[i*stride+skew:])
					}
					t1 := time.Now()
					for i := range blocks {
						s := src[i*stride+skew:][:blockBytes]
						sink = updateCopy(k, sink, dst[i*blockBytes:(i+1)*blockBytes], s)
					}
					tc, tu = append(tc, t1.Sub(t0)), append(tu, time.Since(t1))
				}
				slices.Sort(tc)
				slices.Sort(tu)
				b.ReportMetric(tc[len(tc)/2].Seconds()/tu[len(tu)/2].Seconds(), "p50_update_copy/copy")
				b.ReportMetric(tc[0].Seconds()/tu[0].Seconds(), "best_update_copy/copy")
			})
		}
	}
}
