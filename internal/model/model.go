package model

import (
	"fmt"
	"math"
	"unsafe"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/quant"
)

type layer struct {
	attnNorm, ffnNorm []float32
	wq, wk, wv, wo    *kernels.Weight
	bq, bk, bv        []float32 // qwen2 only
	qNorm, kNorm      []float32 // qwen3, qwen35
	gate, up, down    *kernels.Weight
	kvLayer           int         // K/V slot of an attention layer in the paged blocks
	delta             *deltaLayer // a Gated DeltaNet layer (qwen35); nil for attention
	kda               *kdaLayer   // a KDA layer (kimi-linear)
	mla               *mlaLayer   // an MLA layer
	moe               *moeLayer   // a mixture-of-experts FFN (gate, up, down unused)
	attnRes, ffnRes   []float32   // Kimi-K3's residual-mix scores (k3.go); nil without
}

// Model is a loaded transformer. See the package doc for its invariants.
type Model struct {
	cfg        Config
	pool       *kernels.Pool
	embd       *kernels.Weight
	outputNorm []float32
	output     *kernels.Weight
	layers     []layer
	products   []*kernels.Weight // Products
	rope       kernels.RoPEParams
	scratch    scratch
	fns        rowFns    // built once (initRowFns): per-call closures would allocate every step
	q35        q35Fns    // qwen35's, likewise (initQ35Fns)
	moe        moeFns    // moeForward's, likewise (initMoEFns)
	mla        mlaFns    // mlaForward's and gatherLatents', likewise (initMLAFns)
	kda        kdaFns    // kdaForward's, likewise (initKDAFns)
	k3         k3Fns     // k3Forward's, likewise (initK3Fns)
	outputRes  []float32 // Kimi-K3's output residual-mix scores; nil without
	// outOnly: the blocks leave their output in scratch.h and do not add it to the stream
	// (Kimi-K3, whose k3Forward keeps the stream itself)
	outOnly bool
	// fused is the fused decode step (fused.go); unfused turns it off (SetFusedDecode);
	// fusable caches whether every layer can take it (0 not yet known, 1 yes, -1 no).
	fused   fusedStep
	unfused bool
	fusable int8
}

// rowFns are the per-row steps of the attention and FFN blocks as closures bound to the
// model once. They read their layer and sequences from scratch (li, seqs), so that a decode
// step does not allocate a closure per call (m.rows may hand it to the pool, so it escapes).
type rowFns struct {
	attnNorm, qkvRows, residual, ffnNorm, swiglu func(lo, hi int)
}

// Config returns the model's hyper-parameters.
func (m *Model) Config() Config { return m.cfg }

// Load builds a Model over the tensors of f. The weights alias f's mapping.
func Load(f *gguf.File, pool *kernels.Pool) (*Model, error) {
	cfg, err := ParseConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, pool: pool}
	ld := loader{f: f}
	m.embd = ld.matrix("token_embd.weight", cfg.Vocab, cfg.Dim)
	m.outputNorm = ld.vector("output_norm.weight", cfg.Dim)
	if cfg.Tied {
		m.output = m.embd
	} else {
		m.output = ld.matrix("output.weight", cfg.Vocab, cfg.Dim)
	}
	m.rope = kernels.RoPEParams{NDims: cfg.RopeDims, Base: cfg.RopeBase, FreqScale: cfg.RopeFreqScale, NeoX: cfg.RopeNeoX}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		m.rope.Factors = ld.vector("rope_freqs.weight", cfg.RopeDims/2)
	}
	m.layers = make([]layer, cfg.Layers)
	if !cfg.Tied && len(ld.products) > 0 {
		ld.products = ld.products[1:] // token_embd is read a row per token, never multiplied
	}
	if cfg.Kimi() {
		m.loadKimi(&ld)
		m.products = ld.products
		if ld.err != nil {
			return nil, ld.err
		}
		return m, nil
	}
	if cfg.Arch == ArchQwen35 {
		m.loadHybrid(&ld)
		m.products = ld.products
		if ld.err != nil {
			return nil, ld.err
		}
		return m, nil
	}
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &m.layers[i]
		l.kvLayer = i
		l.attnNorm = ld.vector(p+"attn_norm.weight", cfg.Dim)
		l.ffnNorm = ld.vector(p+"ffn_norm.weight", cfg.Dim)
		l.wq = ld.matrix(p+"attn_q.weight", cfg.QDim(), cfg.Dim)
		l.wk = ld.matrix(p+"attn_k.weight", cfg.KVDim(), cfg.Dim)
		l.wv = ld.matrix(p+"attn_v.weight", cfg.KVDim(), cfg.Dim)
		l.wo = ld.matrix(p+"attn_output.weight", cfg.Dim, cfg.QDim())
		l.gate = ld.matrix(p+"ffn_gate.weight", cfg.FFN, cfg.Dim)
		l.up = ld.matrix(p+"ffn_up.weight", cfg.FFN, cfg.Dim)
		l.down = ld.matrix(p+"ffn_down.weight", cfg.Dim, cfg.FFN)
		if cfg.QKVBias {
			l.bq = ld.vector(p+"attn_q.bias", cfg.QDim())
			l.bk = ld.vector(p+"attn_k.bias", cfg.KVDim())
			l.bv = ld.vector(p+"attn_v.bias", cfg.KVDim())
		}
		if cfg.QKNorm {
			l.qNorm = ld.vector(p+"attn_q_norm.weight", cfg.HeadDim)
			l.kNorm = ld.vector(p+"attn_k_norm.weight", cfg.HeadDim)
		}
	}
	m.products = ld.products
	if ld.err != nil {
		return nil, ld.err
	}
	return m, nil
}

// Products returns the weights the forward pass multiplies by, in load order (every matrix
// but a token embedding that is not also the output): what a decode step streams, for
// calibration (kernels.CalibratePrefetch). The slice is the model's; do not modify it.
func (m *Model) Products() []*kernels.Weight { return m.products }

// loader fetches tensors by name, checking shape and type; the first error sticks.
type loader struct {
	f   *gguf.File
	err error
	// products is every matrix loaded so far (matrix), in order.
	products []*kernels.Weight
}

func (ld *loader) tensor(name string, dims ...int) (gguf.TensorInfo, []byte) {
	if ld.err != nil {
		return gguf.TensorInfo{}, nil
	}
	ti, ok := ld.f.Tensor(name)
	if !ok {
		ld.err = fmt.Errorf("%w: tensor %s missing", ErrUnsupported, name)
		return ti, nil
	}
	match := len(ti.Dims) == len(dims)
	for i := 0; match && i < len(dims); i++ {
		match = ti.Dims[i] == uint64(dims[i])
	}
	if !match {
		ld.err = fmt.Errorf("%w: tensor %s has shape %v, want %v", ErrUnsupported, name, ti.Dims, dims)
		return ti, nil
	}
	data, err := ld.f.TensorData(name)
	if err != nil {
		ld.err = err
	}
	return ti, data
}

// matrix loads a [rows][cols] weight (GGUF dims {cols, rows}).
func (ld *loader) matrix(name string, rows, cols int) *kernels.Weight {
	ti, data := ld.tensor(name, cols, rows)
	if ld.err != nil {
		return nil
	}
	switch ti.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
	default:
		ld.err = fmt.Errorf("%w: tensor %s has type %s", ErrUnsupported, name, ti.Type)
		return nil
	}
	if cols%ti.Type.BlockSize() != 0 {
		ld.err = fmt.Errorf("%w: tensor %s row length %d is not a multiple of %s's block %d", ErrUnsupported, name, cols, ti.Type, ti.Type.BlockSize())
		return nil
	}
	w := &kernels.Weight{Type: ti.Type, Rows: rows, Cols: cols, Data: data}
	ld.products = append(ld.products, w)
	return w
}

// vector loads an f32 vector of n elements as a view of the mapping.
func (ld *loader) vector(name string, n int) []float32 {
	ti, data := ld.tensor(name, n)
	if ld.err != nil {
		return nil
	}
	if ti.Type != gguf.TypeF32 {
		// Rare (norms are f32 in every converter); convert once.
		out := make([]float32, n)
		if err := dequantizeRow(ti.Type, data, out); err != nil {
			ld.err = fmt.Errorf("tensor %s: %w", name, err)
		}
		return out
	}
	return f32View(data)
}

// f32View reinterprets little-endian f32 bytes. GGUF aligns tensor data to >= 32 bytes, so the
// view is aligned.
func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func dequantizeRow(t gguf.Type, src []byte, dst []float32) error {
	switch t {
	case gguf.TypeF32:
		copy(dst, f32View(src))
	case gguf.TypeF16:
		for i := range dst {
			dst[i] = quant.F16ToF32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
		}
	case gguf.TypeBF16:
		for i := range dst {
			dst[i] = quant.BF16ToF32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
		}
	default:
		return quant.DequantizeRow(t, src, dst)
	}
	return nil
}

// Sequence is one sequence's share of a forward step.
type Sequence struct {
	Tokens []int32          // new tokens, at positions Pos, Pos+1, ... (or Positions)
	Pos    int              // position of Tokens[0]
	KV     *kernels.PagedKV // the sequence's blocks; must cover every position up to the last
	// Positions, when non-nil, are the tokens' positions, one each, strictly increasing from
	// Pos (Positions[0] == Pos), and need not be consecutive: chunk blending recomputes
	// scattered tokens of a prompt (package blend, CacheBlend). RoPE, the K/V store and the
	// causal mask use them, so a token's row is computed exactly as in a step of consecutive
	// positions (the determinism rule below); the positions skipped must hold their K/V
	// already. Attention models only (llama, qwen2, qwen3): a recurrent state or MLA's
	// latent rows advance over consecutive tokens.
	Positions []int
	// Logits, when non-nil (length Vocab), receives the logits of the last token.
	Logits []float32
	// State is the sequence's recurrent state, for models with Gated DeltaNet or KDA layers
	// (Config.Hybrid); State.Pos must equal Pos. Forward advances it. Ignored otherwise.
	State *State
	// Checkpoints, for hybrid models, receive copies of the state as it stands at positions
	// inside this step (a block boundary, say): the caller sets each one's Pos, increasing,
	// in (Pos, Pos+len(Tokens)], on states from NewState; Forward fills the rest. Resuming
	// from a checkpoint gives bitwise the numbers of the uninterrupted run.
	Checkpoints []*State
}

// scratch is Forward's working memory, kept on the Model so that a step allocates nothing
// once its buffers have grown: what every architecture uses, then one part per layer kind.
// The parts are embedded, so a row step names a buffer (sc.conv) whatever part holds it.
// A buffer is valid only within the layer that filled it; some are reused by the next kind
// (qfull, core: see their parts).
type scratch struct {
	x, h, q, k, v, att, gate, up []float32
	outRows, logits              []float32
	positions                    []int
	rowPos                       []int   // every row's position (rowPositions)
	rowSeq                       []int32 // every row's sequence index (rowPositions)
	attnSeqs                     []kernels.AttnSeq
	// the current layer and batch, for the bound row steps (rowFns); seqs is cleared after use
	li   int
	seqs []Sequence
	// the bound row steps' sequence, its first row and rows (q35Fns, kdaFns, mlaFns; n is
	// also the SwiGLU rows' width in moeFns)
	cur     *Sequence
	base, n int
	// MatMuls' destination and weight lists, kept here so that they do not escape per call
	qkvDst  [3][]float32
	qkvW    [3]*kernels.Weight
	gateDst [2][]float32
	gateW   [2]*kernels.Weight

	recurrentScratch
	mlaScratch
	k3Scratch
	moeScratch
}

// recurrentScratch is the recurrent layers' (qwen35's Gated DeltaNet and gated attention,
// kimi's KDA): projections, conv window and output, gates, and the layer's state.
type recurrentScratch struct {
	// qfull is also MLA's full queries; core also MLA's attention output
	qfull, qgate, qkv, conv, z, beta, alpha, core, window []float32
	// KDA: the low-rank gates' inner rows
	lowRank, lowRank2 []float32
	// the sequence's conv window and its recurrent state for the layer (q35Fns, kdaFns)
	win, state []float32
	dnDst      [4][]float32
	dnW        [4]*kernels.Weight
	kdaDst     [6][]float32
	kdaW       [6]*kernels.Weight

	// stT holds each delta-rule head's state transposed while a run of tokens steps it
	// (kernels.DeltaStepT); the heads of one layer side by side.
	stT []float32
}

// mlaScratch is multi-head latent attention's (kimi, Kimi-K3).
type mlaScratch struct {
	// absorbed queries, per-head rows, attention output, the gathered latent view
	mlaQ, headIn, headOut, mlaOut, lat []float32
	qa, mlaGate                        []float32 // K3: compressed queries, the output gate
	latF16                             []uint16
	latTable                           []int32
	// the bound row steps (mlaFns): the head, and gatherLatents' source
	head             int
	latKV            *kernels.PagedKV
	latSlot, latHalf int
	latView          kernels.PagedKV
}

// k3Scratch is Kimi-K3's residual mix (k3Fns): the stream, the banked rows
// [bank][row][Dim], the scores, the score vector in use, the batch's rows, the banks so
// far, and whether the layer restarts the stream.
type k3Scratch struct {
	res, stack, resScores, resW []float32
	resM, banks                 int
	restart                     bool
}

// moeScratch is the mixture of experts': routing and expert rows.
type moeScratch struct {
	router, selW, expIn, expOut, expRes, expLat []float32
	sel, rows                                   []int
}

// layersForward runs every layer over the embeddings in sc.x, each adding its token mixer's
// and its FFN's output to the stream (every architecture but Kimi-K3: k3Forward).
func (m *Model) layersForward(seqs []Sequence, M int) {
	c := &m.cfg
	for li := range m.layers {
		switch {
		case m.layers[li].kda != nil:
			m.kdaForward(li, seqs, M)
		case m.layers[li].mla != nil:
			m.mlaForward(li, seqs, M)
		case m.layers[li].delta != nil:
			m.deltaNetForward(li, seqs, M)
		case c.AttnGate:
			m.gatedAttnForward(li, seqs, M)
		default:
			m.layerForward(li, seqs, M)
		}
		if m.layers[li].moe != nil {
			m.moeForward(li, M)
		} else {
			m.ffnForward(li, M)
		}
	}
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// Forward runs one step over the new tokens of every sequence in seqs, writing their K/V into
// the sequences' blocks and filling the requested logits.
func (m *Model) Forward(seqs []Sequence) error {
	c := m.cfg
	M, err := m.begin(seqs)
	if err != nil {
		return err
	}
	sc := &m.scratch
	if c.Arch == ArchKimiK3 {
		m.k3Forward(seqs, M) // k3.go: its own residual stream around the blocks
	} else if m.fusedOK(seqs, M) {
		m.decodeFused(seqs) // fused.go: one sequence's decode step as one parallel region
	} else {
		m.layersForward(seqs, M)
	}
	if c.Hybrid() {
		for i := range seqs {
			seqs[i].State.Pos += len(seqs[i].Tokens)
		}
	}

	// Output rows: only the last token of sequences that asked for logits.
	nOut := 0
	for _, s := range seqs {
		if s.Logits != nil {
			nOut++
		}
	}
	if nOut == 0 {
		return nil
	}
	sc.outRows = grow(sc.outRows, nOut*c.Dim)
	r, o := 0, 0
	for _, s := range seqs {
		r += len(s.Tokens)
		if s.Logits != nil {
			kernels.RMSNorm(sc.outRows[o*c.Dim:(o+1)*c.Dim], sc.x[(r-1)*c.Dim:r*c.Dim], m.outputNorm, c.NormEps)
			o++
		}
	}
	if nOut == 1 {
		// Decode of one sequence: the head writes straight into the caller's buffer, so the
		// vocabulary is passed over once (the MatMul) and not copied after.
		for _, s := range seqs {
			if s.Logits != nil {
				kernels.MatMul(m.pool, s.Logits, sc.outRows, 1, m.output)
			}
		}
		return nil
	}
	if dst := logitsInPlace(seqs, nOut, c.Vocab); dst != nil {
		// The callers' rows lie back to back in one buffer: the head writes them there.
		kernels.MatMul(m.pool, dst, sc.outRows, nOut, m.output)
		return nil
	}
	sc.logits = grow(sc.logits, nOut*c.Vocab)
	kernels.MatMul(m.pool, sc.logits, sc.outRows, nOut, m.output)
	o = 0
	for _, s := range seqs {
		if s.Logits != nil {
			copy(s.Logits, sc.logits[o*c.Vocab:(o+1)*c.Vocab])
			o++
		}
	}
	return nil
}

// ForwardKV runs seqs through layers [0, layer) and then only layer's attention input
// (norm, Q/K/V projections, RoPE, the K/V store): every token's K/V is stored for layers
// 0..layer, bitwise what Forward stores there, and nothing past it runs (no attention at
// layer, no logits: Logits must be nil). CacheBlend (package blend) reads layer's fresh K/V
// back (kernels.LoadKV) to find the chunk tokens whose cached K/V deviate most. Attention
// models only (llama, qwen2, qwen3), 0 <= layer < Config.Layers.
func (m *Model) ForwardKV(seqs []Sequence, layer int) error {
	c := &m.cfg
	if c.Hybrid() || c.Kimi() || c.AttnGate {
		return fmt.Errorf("%w: ForwardKV on %s (attention models only)", ErrUnsupported, c.Arch)
	}
	if layer < 0 || layer >= c.Layers {
		return fmt.Errorf("model: ForwardKV through layer %d of %d", layer, c.Layers)
	}
	for i, s := range seqs {
		if s.Logits != nil {
			return fmt.Errorf("model: ForwardKV sequence %d asks for logits", i)
		}
	}
	M, err := m.begin(seqs)
	if err != nil {
		return err
	}
	for li := range layer {
		m.layerForward(li, seqs, M)
		m.ffnForward(li, M)
	}
	m.layerQKV(layer, seqs, M)
	return nil
}

// begin checks seqs, sizes the scratch for their M rows, embeds their tokens into sc.x and
// lays out every row's position (rowPositions).
func (m *Model) begin(seqs []Sequence) (int, error) {
	c := m.cfg
	M := 0
	for i, s := range seqs {
		if len(s.Tokens) == 0 {
			return 0, fmt.Errorf("model: sequence %d has no tokens", i)
		}
		if s.Logits != nil && len(s.Logits) != c.Vocab {
			return 0, fmt.Errorf("model: sequence %d logits buffer has %d entries, want %d", i, len(s.Logits), c.Vocab)
		}
		for _, t := range s.Tokens {
			if t < 0 || int(t) >= c.Vocab {
				return 0, fmt.Errorf("model: token id %d outside vocabulary of %d", t, c.Vocab)
			}
		}
		if c.Hybrid() {
			if s.State == nil || !s.State.fits(c) {
				return 0, fmt.Errorf("model: sequence %d has no recurrent state for this model (see NewState)", i)
			}
			if s.State.Pos != s.Pos {
				return 0, fmt.Errorf("model: sequence %d starts at position %d but its recurrent state is at %d", i, s.Pos, s.State.Pos)
			}
			last := s.Pos
			for _, cp := range s.Checkpoints {
				if cp == nil || !cp.fits(c) || cp.Pos <= last || cp.Pos > s.Pos+len(s.Tokens) {
					return 0, fmt.Errorf("model: sequence %d: checkpoints must be states of this model at increasing positions in (%d, %d]", i, s.Pos, s.Pos+len(s.Tokens))
				}
				last = cp.Pos
			}
		}
		if c.count(LayerMLA) > 0 {
			if err := m.mlaCheck(s.KV); err != nil {
				return 0, fmt.Errorf("%w (sequence %d)", err, i)
			}
		}
		if s.Positions != nil {
			if err := m.checkPositions(s); err != nil {
				return 0, fmt.Errorf("%w (sequence %d)", err, i)
			}
		}
		M += len(s.Tokens)
	}
	sc := &m.scratch
	sc.x = grow(sc.x, M*c.Dim)
	sc.h = grow(sc.h, M*c.Dim)
	sc.q = grow(sc.q, M*c.QDim())
	sc.k = grow(sc.k, M*c.KVDim())
	sc.v = grow(sc.v, M*c.KVDim())
	sc.att = grow(sc.att, M*c.QDim())
	sc.gate = grow(sc.gate, M*c.FFN)
	sc.up = grow(sc.up, M*c.FFN)

	// Embeddings.
	rowBytes := m.embd.Type.RowBytes(c.Dim)
	r := 0
	for _, s := range seqs {
		for _, t := range s.Tokens {
			src := m.embd.Data[int(t)*rowBytes : (int(t)+1)*rowBytes]
			if err := dequantizeRow(m.embd.Type, src, sc.x[r*c.Dim:(r+1)*c.Dim]); err != nil {
				return 0, err
			}
			r++
		}
	}

	switch {
	case c.Kimi():
		m.kimiScratch(seqs, M)
	case c.Hybrid():
		m.hybridScratch(seqs, M)
	}
	m.rowPositions(seqs)
	return M, nil
}

// rowsInline is the element count (rows × row width) below which a per-row step runs on the
// calling thread: waking the pool's workers for it and waiting for them costs more than the
// work. A decode step's norms, adds and SwiGLU (a few rows) stay inline, so each layer waits
// for its threads only at the matrix products (and attention, when long). Which thread runs a
// row never changes its value.
const rowsInline = 1 << 15

// rows runs fn over rows [0, M) of width elements each: inline when small (rowsInline),
// else across the pool.
func (m *Model) rows(M, width int, fn func(lo, hi int)) {
	if M*width <= rowsInline {
		fn(0, M)
		return
	}
	m.pool.For(M, fn)
}

// rowPositions fills sc.rowPos with every row's position and sc.rowSeq with its
// sequence's index, rows in batch order.
func (m *Model) rowPositions(seqs []Sequence) {
	sc := &m.scratch
	sc.rowPos = sc.rowPos[:0]
	sc.rowSeq = sc.rowSeq[:0]
	for si, s := range seqs {
		if s.Positions != nil {
			sc.rowPos = append(sc.rowPos, s.Positions...)
		}
		for j := range s.Tokens {
			if s.Positions == nil {
				sc.rowPos = append(sc.rowPos, s.Pos+j)
			}
			sc.rowSeq = append(sc.rowSeq, int32(si))
		}
	}
}

// checkPositions checks s.Positions (see Sequence): one per token, strictly increasing from
// s.Pos, on a model whose every layer is attention over per-token K/V.
func (m *Model) checkPositions(s Sequence) error {
	c := &m.cfg
	if c.Hybrid() || c.Kimi() {
		return fmt.Errorf("%w: explicit positions on %s (attention models only)", ErrUnsupported, c.Arch)
	}
	if len(s.Positions) != len(s.Tokens) || s.Positions[0] != s.Pos {
		return fmt.Errorf("model: %d positions from %d for %d tokens from %d", len(s.Positions), s.Positions[0], len(s.Tokens), s.Pos)
	}
	for j := 1; j < len(s.Positions); j++ {
		if s.Positions[j] <= s.Positions[j-1] {
			return fmt.Errorf("model: positions not increasing: %d after %d", s.Positions[j], s.Positions[j-1])
		}
	}
	return nil
}

// logitsInPlace returns the nOut requested logits rows as one [nOut][vocab] slice when they
// are consecutive rows of one buffer (the first's capacity spans them all, so they are one
// allocation), in batch order; else nil.
func logitsInPlace(seqs []Sequence, nOut, vocab int) []float32 {
	var all []float32
	o := 0
	for _, s := range seqs {
		if s.Logits == nil {
			continue
		}
		if all == nil {
			if cap(s.Logits) < nOut*vocab {
				return nil
			}
			all = s.Logits[:nOut*vocab]
		} else if &s.Logits[0] != &all[o*vocab] {
			return nil
		}
		o++
	}
	return all
}

func (m *Model) layerForward(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	sc := &m.scratch
	qd := c.QDim()
	m.layerQKV(li, seqs, M)

	// Attention: each sequence over its own block table, the decode tokens of all of them
	// in one parallel loop.
	attn := kernels.AttnParams{NHeads: c.Heads, NKVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	sc.attnSeqs = sc.attnSeqs[:0]
	r0 := 0
	for si := range seqs {
		n := len(seqs[si].Tokens)
		sc.attnSeqs = append(sc.attnSeqs, kernels.AttnSeq{Out: sc.att[r0*qd : (r0+n)*qd], Q: sc.q[r0*qd : (r0+n)*qd],
			Positions: sc.rowPos[r0 : r0+n], KV: seqs[si].KV})
		r0 += n
	}
	kernels.AttentionSeqs(m.pool, sc.attnSeqs, l.kvLayer, attn)
	clear(sc.attnSeqs) // drop references to the caller's K/V

	kernels.MatMul(m.pool, sc.h, sc.att, M, l.wo)
	m.addResidual(M)
}

// layerQKV runs layer li's attention input over the stream: norm, the Q/K/V projections
// into sc.q, sc.k and sc.v, then per row bias, QK-norm, RoPE at the row's position and the
// K/V store.
func (m *Model) layerQKV(li int, seqs []Sequence, M int) {
	c := &m.cfg
	l := &m.layers[li]
	sc := &m.scratch
	qd, kvd := c.QDim(), c.KVDim()
	m.initRowFns()
	sc.li, sc.seqs = li, seqs

	m.rows(M, c.Dim, m.fns.attnNorm)
	// q, k and v read the same rows: one quantization of them serves all three.
	sc.qkvDst = [3][]float32{sc.q, sc.k, sc.v}
	sc.qkvW = [3]*kernels.Weight{l.wq, l.wk, l.wv}
	kernels.MatMuls(m.pool, sc.h, M, sc.qkvDst[:], sc.qkvW[:])

	// Per token, every sequence's rows in one pass: bias, QK-norm, RoPE at the row's
	// position, and the K/V store.
	m.rows(M, qd+2*kvd, m.fns.qkvRows)
	sc.seqs = nil // drop references to the caller's sequences
}

// initRowFns builds m.fns on first use. Each closure captures only m; the layer is
// m.scratch.li and the batch m.scratch.seqs, set by the caller before m.rows.
func (m *Model) initRowFns() {
	if m.fns.attnNorm != nil {
		return
	}
	c, sc := &m.cfg, &m.scratch
	m.fns.attnNorm = func(lo, hi int) {
		l := &m.layers[sc.li]
		for i := lo; i < hi; i++ {
			kernels.RMSNorm(sc.h[i*c.Dim:(i+1)*c.Dim], sc.x[i*c.Dim:(i+1)*c.Dim], l.attnNorm, c.NormEps)
		}
	}
	m.fns.qkvRows = func(lo, hi int) {
		l := &m.layers[sc.li]
		qd, kvd := c.QDim(), c.KVDim()
		for i := lo; i < hi; i++ {
			q := sc.q[i*qd : (i+1)*qd]
			k := sc.k[i*kvd : (i+1)*kvd]
			v := sc.v[i*kvd : (i+1)*kvd]
			if l.bq != nil {
				kernels.Add(q, l.bq)
				kernels.Add(k, l.bk)
				kernels.Add(v, l.bv)
			}
			if l.qNorm != nil {
				for h := 0; h < c.Heads; h++ {
					kernels.RMSNorm(q[h*c.HeadDim:(h+1)*c.HeadDim], q[h*c.HeadDim:(h+1)*c.HeadDim], l.qNorm, c.NormEps)
				}
				for h := 0; h < c.KVHeads; h++ {
					kernels.RMSNorm(k[h*c.HeadDim:(h+1)*c.HeadDim], k[h*c.HeadDim:(h+1)*c.HeadDim], l.kNorm, c.NormEps)
				}
			}
			pos := sc.rowPos[i]
			kernels.RoPE(q, c.Heads, c.HeadDim, pos, m.rope)
			kernels.RoPE(k, c.KVHeads, c.HeadDim, pos, m.rope)
			kernels.StoreKV(sc.seqs[sc.rowSeq[i]].KV, l.kvLayer, pos, k, v)
		}
	}
	m.fns.residual = func(lo, hi int) {
		for i := lo; i < hi; i++ {
			kernels.Add(sc.x[i*c.Dim:(i+1)*c.Dim], sc.h[i*c.Dim:(i+1)*c.Dim])
		}
	}
	m.fns.ffnNorm = func(lo, hi int) {
		l := &m.layers[sc.li]
		for i := lo; i < hi; i++ {
			kernels.RMSNorm(sc.h[i*c.Dim:(i+1)*c.Dim], sc.x[i*c.Dim:(i+1)*c.Dim], l.ffnNorm, c.NormEps)
		}
	}
	m.fns.swiglu = func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g, u := sc.gate[i*c.FFN:(i+1)*c.FFN], sc.up[i*c.FFN:(i+1)*c.FFN]
			if c.Arch == ArchKimiK3 {
				situ(g, g, u, c.K3.SituBeta, c.K3.SituLinearBeta) // K3's FFN activation
				continue
			}
			kernels.SwiGLU(g, g, u)
		}
	}
}

// addResidual adds the token mixer's output (sc.h) to the residual stream; not for Kimi-K3,
// whose stream k3Forward keeps.
func (m *Model) addResidual(M int) {
	if m.outOnly {
		return
	}
	m.initRowFns()
	m.rows(M, m.cfg.Dim, m.fns.residual)
}

// ffnForward runs layer li's feed-forward block on the residual stream: norm, SwiGLU, add.
func (m *Model) ffnForward(li int, M int) {
	c := &m.cfg
	l := &m.layers[li]
	sc := &m.scratch
	m.initRowFns()
	sc.li = li
	m.rows(M, c.Dim, m.fns.ffnNorm)
	sc.gateDst = [2][]float32{sc.gate, sc.up}
	sc.gateW = [2]*kernels.Weight{l.gate, l.up}
	kernels.MatMuls(m.pool, sc.h, M, sc.gateDst[:], sc.gateW[:])
	m.rows(M, c.FFN, m.fns.swiglu)
	kernels.MatMul(m.pool, sc.h, sc.gate, M, l.down)
	m.addResidual(M)
}
