//go:build amd64

package crc32c

import (
	"hash/crc32"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// minFold is the shortest input the folding kernel takes; shorter ones go to hash/crc32.
// The kernel needs 256 bytes (its four accumulators are loaded whole), and at 256 its set-up
// and final reduction are already paid for (BenchmarkUpdate/256).
const minFold = 256

// best picks the fastest implementation the CPU and OS support: the AVX-512 kernel (which
// finishes with the SSE4.2 CRC32 instruction), else hash/crc32. There is no 128-bit
// PCLMULQDQ kernel: four 128-bit accumulators ran at 0.45-0.6x of hash/crc32's three-way
// CRC32 on an AMD Zen 5 (10-14 GB/s against 23), and PCLMULQDQ's throughput is no better
// than CRC32's on the Intel and AMD cores that lack VPCLMULQDQ with AVX-512.
func best() impl {
	x := &cpu.X86
	if x.HasSSE42 && x.HasPCLMULQDQ && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VPCLMULQDQ {
		return implAVX512
	}
	return implGeneric
}

// supported reports whether k runs on this CPU (for tests that force a path).
func supported(k impl) bool { return k <= best() }

// foldAVX512 returns the raw CRC state (not inverted) of n bytes at src, starting from state
// s; with dst non-nil it also copies the n bytes to dst.
//
// REQUIRES: n % 16 == 0, n >= 256.
//
//go:noescape
func foldAVX512(s uint32, dst, src *byte, n int) uint32

// fold is Update (dst nil) or UpdateCopy through the AVX-512 kernel. hash/crc32 and copy()
// take the bytes before src's first 64-byte boundary and the last len%16; the kernel takes
// the rest. A record's K/V starts 224 bytes in: with a load split across two cache lines
// every time, the kernel ran at 0.92x of copy(); started at the boundary, 0.96x
// (BenchmarkUpdateCopyVsCopy).
//
// REQUIRES: len(src) >= minFold; dst nil or len(dst) == len(src).
func fold(crc uint32, dst, src []byte) uint32 {
	if head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(src))) & 63); head != 0 && len(src)-head >= minFold {
		crc = crc32.Update(crc, castagnoli, src[:head])
		if dst != nil {
			copy(dst, src[:head])
			dst = dst[head:]
		}
		src = src[head:]
	}
	n := len(src) &^ 15
	var d *byte
	if dst != nil {
		d = unsafe.SliceData(dst)
	}
	crc = ^foldAVX512(^crc, d, unsafe.SliceData(src), n)
	if n < len(src) {
		crc = crc32.Update(crc, castagnoli, src[n:])
		if dst != nil {
			copy(dst[n:], src[n:])
		}
	}
	return crc
}
