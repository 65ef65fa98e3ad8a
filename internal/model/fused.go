package model

import (
	"math"
	"runtime"

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
// member runs every layer, sharing five stages a layer (kernels.Stages), each the work the
// next one needs whole:
//
//  1. The q, k and v heads: a task is one head, its rows of the product, then (q and k)
//     bias, QK-norm and RoPE, and (k and v) its K/V store.
//  2. Attention: a task is one query head.
//  3. The output projection: a task is a share of its rows, added to the stream.
//  4. Gate and up: a task is a share of the rows of both, and their SwiGLU.
//  5. The down projection: a task is a share of its rows, added to the stream.
//
// A member claims tasks until the stage has none left, then waits for the stage's tasks to
// be done (not for the other members), so a member whose thread the Go scheduler takes away
// holds up the step for one task at most. Before its first task of a stage a member norms
// the stream and quantizes it (or the attention or SwiGLU output) itself, for its own use: a
// few thousand values, cheaper than a stage of its own.
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
	rope        []float32   // the step's RoPE table (its one position)
	act, actOut kernels.Act // the normed stream's, and the attention or SwiGLU output's, forms
	attn        []float32   // AttendHeads' scratch
}

// fusedStep is the step decodeFused runs, bound once (no closure per step).
type fusedStep struct {
	m       *Model
	seq     *Sequence
	pos     int
	members []fusedMember
	stages  *kernels.Stages
	totals  []int32 // every stage's task count, layer by layer
	run     func(t *kernels.Team, member int)
}

// The stages of a layer (fused.go's doc), and how many tasks a member's share of a product's
// rows is split in: more evens out a thread that falls behind, fewer keeps each task's
// weight stream long (its first kilobytes are read before the prefetch runs ahead).
const (
	stageQKV = iota
	stageAttn
	stageOut
	stageGateUp
	stageDown
	stagesPerLayer

	// A product's rows are split in tasks of about taskBytes of weights, at least
	// minTasksPerMember a member: a member that finishes its last task early waits for the
	// others' last ones, so a task is short enough that the wait is a spin (kernels' spinMax)
	// and long enough that its stream's first kilobytes, read before the prefetch runs
	// ahead, are a small part of it.
	taskBytes         = 1024 << 10
	minTasksPerMember = 2
)

// rowTasks is how many tasks a stage's products (the same rows of each) are split in: about
// taskBytes of weights each, at least minTasksPerMember per member, at most a task per
// fuseUnit rows.
func rowTasks(members, rows int, ws ...*kernels.Weight) int32 {
	bytes := 0
	for _, w := range ws {
		bytes += len(w.Data)
	}
	n := max((bytes+taskBytes-1)/taskBytes, members*minTasksPerMember)
	return int32(min(n, (rows+fuseUnit-1)/fuseUnit))
}

// SetFusedDecode turns the fused decode step on (the default) or off, for benchmarks that
// compare it with the loop per product; the values are the same either way.
func (m *Model) SetFusedDecode(on bool) { m.unfused = !on }

// fusedOK reports whether decodeFused can run seqs: one sequence's one token on a model of
// plain attention blocks and SwiGLU FFNs, whose products all have a GEMV and whose K/V is f16
// or f32 on the single-query path, with more than one thread to share it.
func (m *Model) fusedOK(seqs []Sequence, M int) bool {
	c := &m.cfg
	if m.unfused || M != 1 || len(seqs) != 1 || m.pool.Threads() < 2 || m.outOnly || m.rope.NDims <= 0 ||
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
	n := m.pool.Threads()
	if fs.run == nil {
		fs.m = m
		fs.run = fs.member
		fs.stages = kernels.NewStages(n)
		fs.members = make([]fusedMember, n)
		for li := range m.layers {
			l := &m.layers[li]
			fs.totals = append(fs.totals, int32(c.Heads+2*c.KVHeads), int32(c.Heads),
				rowTasks(n, c.Dim, l.wo), rowTasks(n, c.FFN, l.gate, l.up), rowTasks(n, c.Dim, l.down))
		}
	}
	fs.seq, fs.pos = &seqs[0], m.scratch.rowPos[0]
	bufLen := kernels.AttendBufLen(fs.pos, m.attnParams())
	for i := range fs.members {
		f := &fs.members[i]
		f.h = grow(f.h, c.Dim)
		f.rope = grow(f.rope, m.rope.NDims)
		if len(f.attn) < bufLen {
			f.attn = make([]float32, bufLen+bufLen/4)
		}
	}
	fs.stages.Reset(fs.totals)
	m.pool.Team(fs.run)
	fs.seq = nil // drop the reference to the caller's sequence
}

// member runs member i: every stage's tasks it claims, layer by layer.
func (fs *fusedStep) member(t *kernels.Team, i int) {
	m := fs.m
	c := &m.cfg
	sc := &m.scratch
	f := &fs.members[i]
	st := fs.stages
	hd, pos, kv := c.HeadDim, fs.pos, fs.seq.KV
	a := m.attnParams()
	x := sc.x[:c.Dim]
	kernels.RoPETable(f.rope, pos, m.rope) // every layer rotates at pos
	for li := range m.layers {
		l := &m.layers[li]
		s0 := li * stagesPerLayer
		// The members hold every P of a small process for a whole step and seldom block, so
		// a goroutine made runnable meanwhile (serve's HTTP writer, given the last token)
		// would wait for the scheduler's 10 ms preemption: a step of smollm-135m f32 took
		// 27 ms through serve instead of 17. Yield once a layer (a few hundred ns when
		// nothing else is runnable).
		runtime.Gosched()

		// 1. q, k and v heads, back to back.
		for ready := false; ; {
			b, ok := st.Claim(s0 + stageQKV)
			if !ok {
				break
			}
			if !ready {
				kernels.RMSNorm(f.h, x, l.attnNorm, c.NormEps)
				f.act.Set(f.h)
				ready = true
			}
			fs.qkvHead(f, l, b, pos, hd, kv)
			st.Done(s0 + stageQKV)
		}
		st.Wait(t, i, s0+stageQKV)

		// 2. Attention, a query head a task.
		for {
			h, ok := st.Claim(s0 + stageAttn)
			if !ok {
				break
			}
			kernels.AttendHeads(sc.att, sc.q, pos, kv, l.kvLayer, a, h, h+1, f.attn)
			st.Done(s0 + stageAttn)
		}
		st.Wait(t, i, s0+stageAttn)

		// 3. The output projection's rows, added to the stream.
		for ready := false; ; {
			k, ok := st.Claim(s0 + stageOut)
			if !ok {
				break
			}
			if !ready {
				f.actOut.Set(sc.att[:c.QDim()])
				ready = true
			}
			r0, r1 := kernels.Split(c.Dim, fuseUnit, int(st.Tasks(s0+stageOut)), k)
			f.actOut.GEMV(sc.h, l.wo, r0, r1)
			kernels.Add(x[r0:r1], sc.h[r0:r1])
			st.Done(s0 + stageOut)
		}
		st.Wait(t, i, s0+stageOut)

		// 4. Gate and up rows and their SwiGLU.
		for ready := false; ; {
			k, ok := st.Claim(s0 + stageGateUp)
			if !ok {
				break
			}
			if !ready {
				kernels.RMSNorm(f.h, x, l.ffnNorm, c.NormEps)
				f.act.Set(f.h)
				ready = true
			}
			f0, f1 := kernels.Split(c.FFN, fuseUnit, int(st.Tasks(s0+stageGateUp)), k)
			f.act.GEMV(sc.gate, l.gate, f0, f1)
			f.act.GEMV(sc.up, l.up, f0, f1)
			kernels.SwiGLU(sc.gate[f0:f1], sc.gate[f0:f1], sc.up[f0:f1])
			st.Done(s0 + stageGateUp)
		}
		st.Wait(t, i, s0+stageGateUp)

		// 5. The down projection's rows, added to the stream.
		for ready := false; ; {
			k, ok := st.Claim(s0 + stageDown)
			if !ok {
				break
			}
			if !ready {
				f.actOut.Set(sc.gate[:c.FFN])
				ready = true
			}
			r0, r1 := kernels.Split(c.Dim, fuseUnit, int(st.Tasks(s0+stageDown)), k)
			f.actOut.GEMV(sc.h, l.down, r0, r1)
			kernels.Add(x[r0:r1], sc.h[r0:r1])
			st.Done(s0 + stageDown)
		}
		st.Wait(t, i, s0+stageDown)
	}
}

// qkvHead computes head block b of layer l's q, k and v (the query heads, then the K heads,
// then the V heads) from the normed stream in f.act, and finishes it: bias, QK-norm, RoPE
// and the K/V store.
func (fs *fusedStep) qkvHead(f *fusedMember, l *layer, b, pos, hd int, kv *kernels.PagedKV) {
	c := &fs.m.cfg
	sc := &fs.m.scratch
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
		kernels.RoPEApply(q, 1, hd, f.rope, fs.m.rope)
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
		kernels.RoPEApply(k, 1, hd, f.rope, fs.m.rope)
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
