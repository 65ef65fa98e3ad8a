package kernels

import (
	"fmt"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// quantJob is one quantized MatMul's state; a Pool keeps one (protected by
// Pool.matMu, like matJob) with its method values bound once.
type quantJob struct {
	run, quantize func(lo, hi int) // j.rowsRange and j.quantizeRange
	xq            []byte           // x rows in the activation type, grown on demand

	at        gguf.Type
	xRowBytes int
	dst, x    []float32
	M         int
	w         *Weight
	blockRows int // weight rows per quant.MatMul call (an L2-sized panel)
}

func newQuantJob() *quantJob {
	j := &quantJob{}
	j.run, j.quantize = j.rowsRange, j.quantizeRange
	return j
}

// matMulQuant handles quantized weights: each x row is quantized once to
// quant.ActivationType into the job's buffer, then quant.MatMul runs over
// ranges of weight rows across the pool. quant.MatMul computes (m, n) the
// same way whatever the row range, so the split keeps the determinism rule.
func matMulQuant(p *Pool, dst, x []float32, M int, w *Weight) {
	switch w.Type {
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K:
	default:
		panic(fmt.Sprintf("kernels: MatMul of %v weights is not supported", w.Type))
	}
	var j *quantJob
	if p == nil {
		j = newQuantJob()
	} else {
		p.matMu.Lock()
		defer p.matMu.Unlock()
		j = p.quant
	}
	K := w.Cols
	at := quant.ActivationType(w.Type)
	*j = quantJob{run: j.run, quantize: j.quantize, xq: j.xq,
		at: at, xRowBytes: at.RowBytes(K), dst: dst, x: x, M: M, w: w}
	j.blockRows = max(1, l2PanelBytes/w.Type.RowBytes(K))
	if len(j.xq) < M*j.xRowBytes {
		j.xq = alignedBytes(M * j.xRowBytes)
	}
	p.For(M, j.quantize)
	p.For(w.Rows, j.run)
	*j = quantJob{run: j.run, quantize: j.quantize, xq: j.xq}
}

func (j *quantJob) quantizeRange(lo, hi int) {
	K := j.w.Cols
	for m := lo; m < hi; m++ {
		quant.QuantizeActivations(j.at, j.x[m*K:m*K+K], j.xq[m*j.xRowBytes:(m+1)*j.xRowBytes])
	}
}

func (j *quantJob) rowsRange(lo, hi int) {
	xq := j.xq[:j.M*j.xRowBytes]
	for n0 := lo; n0 < hi; n0 += j.blockRows {
		quant.MatMul(j.w.Type, j.dst, j.w.Rows, xq, j.M, j.w.Data, j.w.Cols, n0, min(n0+j.blockRows, hi))
	}
}
