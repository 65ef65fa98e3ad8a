//go:build amd64

package quant

func init() {
	if kVNNI {
		extraVariants = append(extraVariants, variant{"avx2", func() func() {
			kVNNI = false
			return func() { kVNNI = true }
		}})
	}
}
