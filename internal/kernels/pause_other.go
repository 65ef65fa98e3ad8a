//go:build !amd64

package kernels

// spinPause does nothing off amd64 (see pause_amd64.go).
func spinPause() {}
