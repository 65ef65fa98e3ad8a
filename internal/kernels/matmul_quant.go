package kernels

import (
	"fmt"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// quantJob is one quantized MatMul's state; a Pool keeps one (protected by
// Pool.matMu, like matJob) with its method values bound once.
type quantJob struct {
	run, quantize, pair func(lo, hi int) // j.rowsRange, j.quantizeRange and j.pairRange
	runGroup            func(lo, hi int) // j.groupRange
	xq                  []byte           // x rows in the activation type, grown on demand
	// xp is the paired form of xq (quant.PreparePairs) for the AVX-512 pair
	// kernels, grown on demand; paired says it holds the current xq's.
	xp     []byte
	paired bool

	at        gguf.Type
	xRowBytes int
	dst, x    []float32
	M         int
	w         *Weight
	blockRows int // weight rows per quant.MatMul call (an L2-sized panel)
	usePairs  bool
	// gws and gdsts are matMulGroup's weights and outputs.
	gws   []*Weight
	gdsts [][]float32
}

func newQuantJob() *quantJob {
	j := &quantJob{}
	j.run, j.quantize, j.pair, j.runGroup = j.rowsRange, j.quantizeRange, j.pairRange, j.groupRange
	return j
}

// matMulQuant handles quantized weights: each x row is quantized once to
// quant.ActivationType into the job's buffer, then quant.MatMul runs over
// ranges of weight rows across the pool. quant.MatMul computes (m, n) the
// same way whatever the row range, so the split keeps the determinism rule.
func matMulQuant(p *Pool, dst, x []float32, M int, w *Weight) {
	checkQuantType(w.Type)
	var j *quantJob
	if p == nil {
		j = newQuantJob()
	} else {
		p.matMu.Lock()
		defer p.matMu.Unlock()
		j = p.quant
	}
	j.matMul(p, dst, x, M, w, false)
}

// gemvRows is the most activation rows for which a product runs as a
// decode step's (Pool.forGEMV's chunks).
const gemvRows = 8

// prepInline is the activation count (M × K) up to which the caller
// quantizes (and pairs) the activations itself: for a decode step's few
// rows, a hand-off to the pool's workers costs more than the work. Every
// row is quantized by the same code either way.
const prepInline = 1 << 14

func checkQuantType(t gguf.Type) {
	switch t {
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
	default:
		panic(fmt.Sprintf("kernels: MatMul of %v weights is not supported", t))
	}
}

// matMul runs one quantized MatMul on j. With reuse, j.xq already holds x's
// rows in w's activation type (the previous matMul on j had the same x, M,
// K and activation type, and nothing ran on j in between); the values are
// the same either way, only the quantization pass is skipped.
// REQUIRES: j is the caller's (Pool.matMu held, or a fresh job).
func (j *quantJob) matMul(p *Pool, dst, x []float32, M int, w *Weight, reuse bool) {
	K := w.Cols
	at := quant.ActivationType(w.Type)
	paired := reuse && j.paired
	*j = quantJob{run: j.run, quantize: j.quantize, pair: j.pair, runGroup: j.runGroup, xq: j.xq, xp: j.xp,
		gws: j.gws, gdsts: j.gdsts, at: at, xRowBytes: at.RowBytes(K), dst: dst, x: x, M: M, w: w}
	j.blockRows = max(1, l2PanelBytes/w.Type.RowBytes(K))
	if len(j.xq) < M*j.xRowBytes {
		if reuse {
			panic("kernels: quantized activations reused but not there")
		}
		j.xq = alignedBytes(M * j.xRowBytes)
	}
	if !reuse {
		if M*K <= prepInline {
			j.quantize(0, M)
		} else {
			p.For(M, j.quantize)
		}
	}
	// Q8_0, Q4_0 and Q5_0 weights with several rows read the paired form,
	// made once per x (MatMuls shares it like xq).
	if n := quant.PairBytes(M, K); n > 0 && pairType(w.Type) {
		if !paired {
			if len(j.xp) < n {
				j.xp = alignedBytes(n)
			}
			if M*K <= prepInline {
				j.pair(0, (M+1)/2)
			} else {
				p.For((M+1)/2, j.pair)
			}
		}
		paired = true
		j.usePairs = true
	}
	n, fn := w.Rows, j.run
	if len(j.gws) > 0 {
		n, fn = 0, j.runGroup
		for _, gw := range j.gws {
			n += gw.Rows
		}
	}
	if M <= gemvRows {
		p.forGEMV(n, fn)
	} else {
		p.For(n, fn)
	}
	*j = quantJob{run: j.run, quantize: j.quantize, pair: j.pair, runGroup: j.runGroup, xq: j.xq, xp: j.xp, paired: paired}
}

// matMulGroup is matMul for weights that read x in the same activation type
// (MatMuls' groups): x is quantized (and paired) once and the weights' rows
// are one range for the pool, so the group costs one wait for the slowest
// thread instead of one per weight. Every value is matMul's.
// REQUIRES: as matMul; len(ws) > 0, all ws share w[0]'s Cols and
// activation type.
func (j *quantJob) matMulGroup(p *Pool, dsts [][]float32, x []float32, M int, ws []*Weight) {
	j.gws, j.gdsts = ws, dsts
	j.matMul(p, dsts[0], x, M, ws[0], false)
}

// groupRange computes the group's rows [lo, hi) (weights' rows back to
// back).
func (j *quantJob) groupRange(lo, hi int) {
	xq := j.xq[:j.M*j.xRowBytes]
	var xp []byte
	if j.usePairs {
		xp = j.xp[:quant.PairBytes(j.M, j.w.Cols)]
	}
	off := 0
	for k, w := range j.gws {
		n0, n1 := max(lo-off, 0), min(hi-off, w.Rows)
		off += w.Rows
		if n0 >= n1 {
			continue
		}
		blockRows := max(1, l2PanelBytes/w.Type.RowBytes(w.Cols))
		for a := n0; a < n1; a += blockRows {
			quant.MatMulPaired(w.Type, j.gdsts[k], w.Rows, xq, xp, j.M, w.Data, w.Cols, a, min(a+blockRows, n1))
		}
	}
}

func pairType(t gguf.Type) bool {
	return t == gguf.TypeQ8_0 || t == gguf.TypeQ4_0 || t == gguf.TypeQ5_0
}

func (j *quantJob) pairRange(lo, hi int) {
	quant.PreparePairs(j.xp, j.xq, j.M, j.w.Cols, lo, hi)
}

// MatMuls computes MatMul(p, dsts[i], x, M, ws[i]) for every i. Weights
// that read x in the same quantized activation type one after another (the
// q, k and v projections; gate and up) share one quantization of x, which
// prefill would otherwise repeat per weight. Every value is the one MatMul
// gives.
func MatMuls(p *Pool, x []float32, M int, dsts [][]float32, ws []*Weight) {
	if len(dsts) != len(ws) {
		panic(fmt.Sprintf("kernels: MatMuls with %d outputs for %d weights", len(dsts), len(ws)))
	}
	shares := func(a, b *Weight) bool {
		return typeIndex(b.Type) < 0 && b.Rows > 0 && b.Cols == a.Cols &&
			quant.ActivationType(a.Type) == quant.ActivationType(b.Type)
	}
	for i := 0; i < len(ws); {
		w := ws[i]
		e := i + 1
		if typeIndex(w.Type) < 0 && M > 0 && w.Rows > 0 && w.Cols > 0 {
			checkQuantType(w.Type)
			for e < len(ws) && shares(w, ws[e]) {
				e++
			}
		}
		if e == i+1 {
			MatMul(p, dsts[i], x, M, w)
			i++
			continue
		}
		for k := i; k < e; k++ {
			checkMatMul(dsts[k], x, M, ws[k])
		}
		var j *quantJob
		if p == nil {
			j = newQuantJob()
		} else {
			p.matMu.Lock()
			j = p.quant
		}
		j.matMulGroup(p, dsts[i:e], x, M, ws[i:e])
		if p != nil {
			p.matMu.Unlock()
		}
		i = e
	}
}

func (j *quantJob) quantizeRange(lo, hi int) {
	K := j.w.Cols
	for m := lo; m < hi; m++ {
		quant.QuantizeActivations(j.at, j.x[m*K:m*K+K], j.xq[m*j.xRowBytes:(m+1)*j.xRowBytes])
	}
}

func (j *quantJob) rowsRange(lo, hi int) {
	xq := j.xq[:j.M*j.xRowBytes]
	var xp []byte
	if j.usePairs {
		xp = j.xp[:quant.PairBytes(j.M, j.w.Cols)]
	}
	for n0 := lo; n0 < hi; n0 += j.blockRows {
		quant.MatMulPaired(j.w.Type, j.dst, j.w.Rows, xq, xp, j.M, j.w.Data, j.w.Cols, n0, min(n0+j.blockRows, hi))
	}
}
