//go:build !amd64

package kernels

const actAsm = false

func expAVX2(*float32, int)      { panic("unreachable") }
func sigmoidAVX2(*float32, int)  { panic("unreachable") }
func softplusAVX2(*float32, int) { panic("unreachable") }
