//go:build amd64

package kernels

//go:noescape
func swiGLUAVX2(dst, gate, up *float32, n int)

func init() {
	if hasAVX2FMA {
		swiGLUBody = func(dst, gate, up []float32) int {
			n := len(dst) &^ 7
			if n > 0 {
				swiGLUAVX2(&dst[0], &gate[0], &up[0], n)
			}
			return n
		}
	}
}
