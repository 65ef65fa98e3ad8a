package model

import (
	"math"

	"stockpot/internal/kernels"
)

// The fused decode step.
//
// A decode step of one sequence is mostly the weights' bytes streaming through the matrix
// products, one row of activations against every weight row. Run as parallel loops (one per
// product, Forward's path), each loop ends in a wait for the slowest thread, and between the
// loops the caller alone runs the norms, the activations' quantization, the bias, RoPE, the
// K/V store and (at short context) attention while the other threads spin: on the 2-core
// development machine that was a fifth of a step's thread time.
//
// decodeFused runs the whole step's layers as one parallel region (kernels.Team): every
// member runs every layer, and the members meet at five barriers a layer, each where the
// next product needs all of the previous one's outputs:
//
//  1. Each member norms the residual stream itself and quantizes it for its own use (a few
//     thousand values: cheaper than a barrier), then computes its share of the q, k and v
//     heads, whole heads, and finishes them alone: bias, QK-norm, RoPE, the K/V store.
//  2. Each member attends its share of the query heads.
//  3. Each member quantizes the attention output, computes its share of the output
//     projection's rows and adds them to the stream.
//  4. Each member norms and quantizes the stream, computes its share of the gate and up rows
//     (the same rows of both) and their SwiGLU.
//  5. Each member quantizes the SwiGLU output, computes its share of the down projection's
//     rows and adds them to the stream.
//
// Every value is the one Forward computes: the same kernels on the same rows (a product's
// row does not depend on which rows are computed with it; kernels.Act.GEMV), whole heads for
// RoPE and the norms, and shares of the element-wise steps that start on a multiple of 16,
// so a vectorized step's tail is the same elements (TestFusedDecodeMatchesForward).

// fuseUnit is what the members' shares of a product's rows and of the element-wise steps
// are multiples of (but the last): a multiple of every vector width (SwiGLU's 8, the tiles'
// rows).
const fuseUnit = 16

// fusedMember is one team member's own buffers.
type fusedMember struct {
	h           []float32   // the normed stream
	act, actOut kernels.Act // the normed stream's, and the attention or SwiGLU output's, forms
	attn        []float32   // AttendHeads' scratch
}

// fusedStep is the step decodeFused runs, bound once (no closure per step).
type fusedStep struct {
	m       *Model
	seq     *Sequence
	pos     int
	members []fusedMember
	run     func(t *kernels.Team, member int)
}

// SetFusedDecode turns the fused decode step on (the default) or off, for benchmarks that
// compare it with the loop per product; the values are the same either way.
func (m *Model) SetFusedDecode(on bool) { m.unfused = !on }

// fusedOK reports whether decodeFused can run seqs: one sequence's one token on a model of
// plain attention blocks and SwiGLU FFNs, whose products all have a GEMV and whose K/V is f16
// or f32 on the single-query path, with more than one thread to share it.
func (m *Model) fusedOK(seqs []Sequence, M int) bool {
	c := &m.cfg
	if m.unfused || M != 1 || len(seqs) != 1 || m.pool.Threads() < 2 || m.outOnly ||
		c.Hybrid() || c.Kimi() || c.AttnGate || c.Arch == ArchKimiK3 {
		return false
	}
	if m.fusable == 0 {
		m.fusable = 1
		for li := range m.layers {
			l := &m.layers[li]
			if l.moe != nil || l.delta != nil || l.kda != nil || l.mla != nil {
				m.fusable = -1
				break
			}
			for _, w := range []*kernels.Weight{l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down} {
				if w == nil || !kernels.GEMVOK(w) {
					m.fusable = -1
				}
			}
		}
	}
	if m.fusable < 0 {
		return false
	}
	return kernels.SingleQuery(seqs[0].KV, m.attnParams())
}

func (m *Model) attnParams() kernels.AttnParams {
	c := &m.cfg
	return kernels.AttnParams{NHeads: c.Heads, NKVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
}

// decodeFused runs every layer of the one-token step in seqs (fusedOK) over sc.x.
func (m *Model) decodeFused(seqs []Sequence) {
	c := &m.cfg
	fs := &m.fused
	if fs.run == nil {
		fs.m = m
		fs.run = fs.member
	}
	n := m.pool.Threads()
	if len(fs.members) != n {
		fs.members = make([]fusedMember, n)
	}
	fs.seq, fs.pos = &seqs[0], m.scratch.rowPos[0]
	bufLen := kernels.AttendBufLen(fs.pos, m.attnParams())
	for i := range fs.members {
		f := &fs.members[i]
		f.h = grow(f.h, c.Dim)
		if len(f.attn) < bufLen {
			f.attn = make([]float32, bufLen+bufLen/4)
		}
	}
	m.pool.Team(fs.run)
	fs.seq = nil // drop the reference to the caller's sequence
}

// member runs every layer's share of member i.
func (fs *fusedStep) member(t *kernels.Team, i int) {
	m := fs.m
	c := &m.cfg
	sc := &m.scratch
	f := &fs.members[i]
	n := t.Members()
	hd, pos, kv := c.HeadDim, fs.pos, fs.seq.KV
	a := m.attnParams()
	x := sc.x[:c.Dim]
	// The q, k and v heads, back to back: member i's share of them.
	heads := c.Heads + 2*c.KVHeads
	b0, b1 := kernels.Split(heads, 1, n, i)
	h0, h1 := kernels.Split(c.Heads, 1, n, i)
	r0, r1 := kernels.Split(c.Dim, fuseUnit, n, i)
	f0, f1 := kernels.Split(c.FFN, fuseUnit, n, i)
	for li := range m.layers {
		l := &m.layers[li]

		// 1. q, k and v heads [b0, b1).
		kernels.RMSNorm(f.h, x, l.attnNorm, c.NormEps)
		f.act.Set(f.h)
		for b := b0; b < b1; b++ {
			switch {
			case b < c.Heads:
				q := sc.q[b*hd : (b+1)*hd]
				f.act.GEMV(sc.q, l.wq, b*hd, (b+1)*hd)
				if l.bq != nil {
					kernels.Add(q, l.bq[b*hd:(b+1)*hd])
				}
				if l.qNorm != nil {
					kernels.RMSNorm(q, q, l.qNorm, c.NormEps)
				}
				kernels.RoPE(q, 1, hd, pos, m.rope)
			case b < c.Heads+c.KVHeads:
				h := b - c.Heads
				k := sc.k[h*hd : (h+1)*hd]
				f.act.GEMV(sc.k, l.wk, h*hd, (h+1)*hd)
				if l.bk != nil {
					kernels.Add(k, l.bk[h*hd:(h+1)*hd])
				}
				if l.kNorm != nil {
					kernels.RMSNorm(k, k, l.kNorm, c.NormEps)
				}
				kernels.RoPE(k, 1, hd, pos, m.rope)
				kernels.StoreKVHeads(kv, l.kvLayer, pos, 0, sc.k, h, h+1)
			default:
				h := b - c.Heads - c.KVHeads
				f.act.GEMV(sc.v, l.wv, h*hd, (h+1)*hd)
				if l.bv != nil {
					kernels.Add(sc.v[h*hd:(h+1)*hd], l.bv[h*hd:(h+1)*hd])
				}
				kernels.StoreKVHeads(kv, l.kvLayer, pos, 1, sc.v, h, h+1)
			}
		}
		t.Barrier(i)

		// 2. Attention, query heads [h0, h1).
		kernels.AttendHeads(sc.att, sc.q, pos, kv, l.kvLayer, a, h0, h1, f.attn)
		t.Barrier(i)

		// 3. The output projection's rows [r0, r1), added to the stream.
		f.actOut.Set(sc.att[:c.QDim()])
		f.actOut.GEMV(sc.h, l.wo, r0, r1)
		kernels.Add(x[r0:r1], sc.h[r0:r1])
		t.Barrier(i)

		// 4. Gate and up rows [f0, f1) and their SwiGLU.
		kernels.RMSNorm(f.h, x, l.ffnNorm, c.NormEps)
		f.act.Set(f.h)
		f.act.GEMV(sc.gate, l.gate, f0, f1)
		f.act.GEMV(sc.up, l.up, f0, f1)
		kernels.SwiGLU(sc.gate[f0:f1], sc.gate[f0:f1], sc.up[f0:f1])
		t.Barrier(i)

		// 5. The down projection's rows [r0, r1), added to the stream.
		f.actOut.Set(sc.gate[:c.FFN])
		f.actOut.GEMV(sc.h, l.down, r0, r1)
		kernels.Add(x[r0:r1], sc.h[r0:r1])
		t.Barrier(i)
	}
}
