package synth

import (
	"math"
)

// rng is xoshiro256**, seeded through SplitMix64. Fast, and the same
// sequence on every platform.
type rng struct{ s [4]uint64 }

func newRNG(seed uint64) *rng {
	var r rng
	for i := range r.s {
		seed += 0x9e3779b97f4a7c15
		z := seed
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		r.s[i] = z ^ (z >> 31)
	}
	return &r
}

func (r *rng) next() uint64 {
	s := &r.s
	out := rotl(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = rotl(s[3], 45)
	return out
}

func rotl(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// uniform returns a float32 uniform in [-1, 1): 24 random bits, exact.
func (r *rng) uniform() float32 {
	return float32(int32(r.next()>>40)-(1<<23)) * (1.0 / (1 << 23))
}

// tensorSeed mixes the build seed with the tensor name (FNV-1a), so every
// tensor has its own stream whatever the order or type of the others.
func tensorSeed(seed uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h ^ (seed * 0x9e3779b97f4a7c15)
}

// fill writes n values: center + std·√3·u for u uniform in [-1, 1), which has
// standard deviation std.
func fill(dst []float32, seed uint64, name string, center, std float64) {
	r := newRNG(tensorSeed(seed, name))
	a := float32(std * math.Sqrt(3))
	c := float32(center)
	for i := range dst {
		dst[i] = c + a*r.uniform()
	}
}

// llama3RopeFactors computes rope_freqs.weight as convert_hf_to_gguf does
// for rope_type "llama3", in float32 like its torch code: one factor per
// rotated pair, 1 for high frequencies, factor for low ones, a smooth
// blend between.
func llama3RopeFactors(headDim int, base float32) []float32 {
	const (
		factor        = float32(8)
		lowFreqFactor = float32(1)
		highFreqFac   = float32(4)
		oldContext    = float32(8192)
	)
	lowWavelen := oldContext / lowFreqFactor
	highWavelen := oldContext / highFreqFac
	out := make([]float32, headDim/2)
	for i := range out {
		exp := float32(2*i) / float32(headDim)
		freq := 1 / float32(math.Pow(float64(base), float64(exp)))
		wavelen := float32(2*math.Pi) / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = factor
		default:
			smooth := (oldContext/wavelen - lowFreqFactor) / (highFreqFac - lowFreqFactor)
			out[i] = 1 / ((1-smooth)/factor + smooth)
		}
	}
	return out
}
