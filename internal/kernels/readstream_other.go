//go:build !amd64

package kernels

// readStream returns the XOR of b's whole 64-bit words (a trailing n%8
// bytes are not read).
func readStream(b []byte) uint64 { return readStreamGo(b) }
