//go:build !amd64

package kernels

// simdFamilies is empty off amd64: the pure-Go reference is used.
func simdFamilies() []*tileKernels { return nil }
