//go:build !amd64

package kernels

const deltaAsm = false

func deltaStepTAVX2(*float32, int, *float32, *float32, *float32, *float32, int, *float32, *float32, float32, float32) {
	panic("unreachable")
}
