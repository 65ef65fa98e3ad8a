//go:build !amd64

package kernels

const convAsm = false

func convSiLUAVX2(*float32, *float32, *float32, int, int, int, int) { panic("unreachable") }
