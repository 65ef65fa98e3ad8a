//go:build !amd64

package crc32c

// Off amd64 hash/crc32 is the only path (it uses the ARMv8 CRC32 instructions on arm64).

const minFold = 0

func best() impl { return implGeneric }

func supported(k impl) bool { return k == implGeneric }

func fold(crc uint32, dst, src []byte) uint32 { panic("crc32c: no folding kernel off amd64") }
