package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// sampler turns logits into a token. It is pure given its RNG state, so a seeded request
// draws the same tokens whether its prompt came from the cache or was computed.
//
// Its outputs are defined by a simple procedure (the one sample_ref_test.go keeps as the
// oracle): sort the vocabulary by logit, best first, ties by id; keep the first top_k; drop
// masked (-inf) tokens; weight each by exp((logit-max)/T), summed in that order; cut at the
// first token where the running share reaches top_p; draw u·sum and walk the list. The code
// below gets bit-identical results without sorting the vocabulary: see draw.
type sampler struct {
	params SamplingParams
	rng    *rand.Rand
	// scratch, reused across steps
	heap   []cand       // draw: partial selection of the best candidates
	ids    []int32      // draw: candidate ids, best first
	big    *sortScratch // draw: the whole-list scratch, held only while a draw needs it
	probs  []float64    // draw: candidate weights
	mask   []uint64     // constrained requests: allowed tokens
	masked []float32    // constrained requests: logits with disallowed tokens at -inf
	// top holds the Token.Top slots of the tokens to come (see slab); room is how many
	// tokens the request may still draw (0: unknown), to size its chunks.
	top  slab[TokenLogprob]
	room int
	// forced, when >= 0, is the token the next sample returns in place of its own choice
	// (Request.FirstToken): the draw is still made, so the random stream advances as it would.
	forced int32
}

// sortScratch is the scratch of a draw over the whole list: about 4 MiB for Qwen's
// vocabulary. It is shared rather than kept per sampler (a sampler lives as long as its
// request, and the runner draws for one request at a time), so it costs that once, not once
// per running request. A free list, not a sync.Pool: the pool drops its items at every
// other GC, and reallocating 4 MiB then is the garbage this avoids.
type sortScratch struct {
	radix [2][]cand
	ids   []int32
	probs []float64
}

// sortScratchFree holds at most sortScratchKeep idle scratches (one per goroutine drawing
// at once: the runner, plus tests that run engines side by side).
var sortScratchFree struct {
	sync.Mutex
	list []*sortScratch
}

const sortScratchKeep = 2

func getSortScratch() *sortScratch {
	f := &sortScratchFree
	f.Lock()
	defer f.Unlock()
	if n := len(f.list); n > 0 {
		sc := f.list[n-1]
		f.list = f.list[:n-1]
		return sc
	}
	return new(sortScratch)
}

func putSortScratch(sc *sortScratch) {
	f := &sortScratchFree
	f.Lock()
	defer f.Unlock()
	if len(f.list) < sortScratchKeep {
		f.list = append(f.list, sc)
	}
}

func newSampler(p SamplingParams, seed uint64) *sampler {
	return &sampler{params: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), forced: -1}
}

// logSumExp returns log Σ exp(logits), accumulated in float64 in index order (this exact
// arithmetic defines every reported logprob: logprob(i) = float64(logits[i]) - lse).
func (s *sampler) logSumExp(logits []float32) float64 {
	mx32 := float32(math.Inf(-1))
	for _, v := range logits {
		if v > mx32 {
			mx32 = v
		}
	}
	mx := float64(mx32)
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum)
}

// argmax returns the first index of the largest logit (llama.cpp's greedy choice on ties).
func argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// sample picks the next token and reports its log-probability and the top n alternatives
// under the distribution of logits before the sampling filters (temperature, top-k, top-p).
// With topN < 0 (the request asked for no logprobs) it reports neither: the pass over the
// vocabulary that logSumExp makes is skipped, so greedy decoding costs one argmax. The chosen
// token is the same either way. Tokens at -inf (masked by a constraint) are never picked nor
// listed. Logits are finite or -inf (never NaN).
func (s *sampler) sample(logits []float32, topN int) Token {
	var id int
	p := s.params
	if p.Temperature <= 0 {
		id = argmax(logits)
	} else {
		id = s.draw(logits)
	}
	if s.forced >= 0 {
		id, s.forced = int(s.forced), -1
	}
	if topN < 0 {
		return Token{ID: int32(id)}
	}
	lse := s.logSumExp(logits)
	tok := Token{ID: int32(id), Logprob: float32(float64(logits[id]) - lse)}
	if topN > 0 {
		n := min(topN, len(logits))
		room := slabTokens * n
		if s.room > 0 {
			room = s.room * n
			s.room--
		}
		tok.Top = topLogprobs(s.top.take(n, room, slabTokens*n), logits, lse)
	}
	return tok
}

// Candidate-set sizes draw tries before sorting the whole list. 256 covers top-p 0.95 of a
// trained model's logits in one pass; 4096 catches a longer tail before paying for the sort.
const (
	firstCands = 256
	moreCands  = 4096
)

// draw samples with temperature, top-k and top-p.
//
// It works on a prefix of the sorted list: the best m candidates by partial selection, and
// the best logit left out (next). A prefix decides the draw exactly when
//   - the weights left out cannot change the sum: in descending order each later weight is at
//     most w(next), and once w(next) < ulp(sum)/2 adding it rounds back to sum (we ask for
//     ulp/4, a margin for exp's last-bit error), so the full list's sum is the prefix's;
//   - top-p's cut falls inside the prefix (or top-p is off); and
//   - the walk of u·sum ends inside the prefix (or top-p cut the list there).
//
// Otherwise it grows the prefix, up to the whole list. The one RNG draw is taken once, so a
// retry sees the same u.
func (s *sampler) draw(logits []float32) int {
	n := len(logits)
	list := n // length of the list before dropping masked tokens
	if k := s.params.TopK; k > 0 && k < n {
		list = k
	}
	var u float64
	drawn := false
	defer func() {
		if s.big != nil {
			putSortScratch(s.big)
			s.big = nil
		}
	}()
	m := min(list, firstCands)
	for {
		full := m == list
		var ids []int32
		var next float32
		switch {
		case m > moreCands || 4*m >= n:
			all := s.sortAll(logits)
			ids = all[:m]
			if !full {
				next = logits[all[m]]
			}
		case full:
			ids = s.selectTop(logits, m)
		default:
			ids = s.selectTop(logits, m+1)
			ids, next = ids[:m], logits[ids[m]]
		}
		id, ok, heavy := s.pick(logits, ids, next, full, &u, &drawn)
		if ok {
			return int(id)
		}
		if full {
			panic("engine: sampler could not pick from the whole list")
		}
		if m < moreCands && heavy < moreCands {
			m = min(list, moreCands)
		} else {
			m = list
		}
	}
}

// pick runs the defining procedure on the sorted prefix ids (the whole list when full;
// otherwise next is the best logit outside it). ok is false when the prefix cannot decide;
// when that is because the weights left out still count, heavy is how many tokens weigh
// enough to count against the prefix's sum (so how long a prefix could decide).
func (s *sampler) pick(logits []float32, ids []int32, next float32, full bool, u *float64, drawn *bool) (id int32, ok bool, heavy int) {
	negInf := float32(math.Inf(-1))
	// Masked tokens sort last; drop them so that rounding can never pick one. A masked token
	// in the prefix (or as next) means everything after it is masked too.
	for len(ids) > 1 && logits[ids[len(ids)-1]] == negInf {
		ids = ids[:len(ids)-1]
		full = true
	}
	if next == negInf {
		full = true
	}
	p := s.params
	inv := 1 / float64(p.Temperature)
	mx := float64(logits[ids[0]])
	buf := &s.probs
	if s.big != nil {
		buf = &s.big.probs
	}
	if cap(*buf) < len(ids) {
		*buf = make([]float64, len(ids))
	}
	probs := (*buf)[:len(ids)]
	sum := 0.0
	for i, t := range ids {
		probs[i] = math.Exp((float64(logits[t]) - mx) * inv)
		sum += probs[i]
	}
	if !full {
		w := math.Exp((float64(next) - mx) * inv)
		if ulp := math.Nextafter(sum, math.Inf(1)) - sum; !(w < ulp/4) {
			// A token counts when (logit-mx)/T >= log(ulp/8): one comparison each.
			cut := math.Log(ulp/8)/inv + mx
			for _, l := range logits {
				if float64(l) >= cut {
					heavy++
				}
			}
			return 0, false, heavy
		}
	}
	cut := false
	if p.TopP > 0 && p.TopP < 1 {
		cum := 0.0
		for i := range probs {
			cum += probs[i] / sum
			if cum >= float64(p.TopP) {
				probs = probs[:i+1]
				ids = ids[:i+1]
				cut = true
				break
			}
		}
		if !cut && !full {
			return 0, false, 0
		}
		sum = 0
		for _, v := range probs {
			sum += v
		}
	}
	if !*drawn {
		*u, *drawn = s.rng.Float64(), true
	}
	r := *u * sum
	for i, v := range probs {
		r -= v
		if r < 0 {
			return ids[i], true, 0
		}
	}
	if !full && !cut {
		return 0, false, 0
	}
	return ids[len(ids)-1], true, 0
}

// cand is a token in the partial selection.
type cand struct {
	logit float32
	id    int32
}

// better is the list order: higher logit first, ties by lower id (-0 and +0 tie).
func better(a, b cand) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

// selectTop returns the best k tokens (1 <= k <= len(logits)), best first, in s.ids. It
// keeps the k best seen in a heap with the worst at the root, so each other token costs one
// comparison with the root: O(n + k log k log(n/k)) on typical logits.
func (s *sampler) selectTop(logits []float32, k int) []int32 {
	if cap(s.heap) < k {
		s.heap = make([]cand, k)
	}
	h := s.heap[:k]
	for i := range h {
		h[i] = cand{logits[i], int32(i)}
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for i := k; i < len(logits); i++ {
		// A tie with the root loses: its id is larger.
		if v := logits[i]; v > h[0].logit {
			h[0] = cand{v, int32(i)}
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, func(a, b cand) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	return s.idsOf(h)
}

// siftDown restores the heap property (every parent worse than its children) below i.
func siftDown(h []cand, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && better(h[c], h[c+1]) {
			c++
		}
		if !better(h[i], h[c]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

func (s *sampler) idsOf(c []cand) []int32 {
	if cap(s.ids) < len(c) {
		s.ids = make([]int32, len(c))
	}
	ids := s.ids[:len(c)]
	for i, x := range c {
		ids[i] = x.id
	}
	return ids
}

// sortAll returns every token in list order (in s.big, the shared scratch), by a stable LSD radix sort on the
// logits' bits (ids enter in ascending order, so ties stay by id): O(n), where sort.Slice
// over 150K tokens took about 20 ms.
func (s *sampler) sortAll(logits []float32) []int32 {
	n := len(logits)
	if s.big == nil {
		s.big = getSortScratch()
	}
	big := s.big
	for i := range big.radix {
		if cap(big.radix[i]) < n {
			big.radix[i] = make([]cand, n)
		}
	}
	src, dst := big.radix[0][:n], big.radix[1][:n]
	// The key orders best first: invert the usual float-to-ordered-uint map. The id field
	// carries the token; the logit field carries the key (as bits) during the sort.
	for i, v := range logits {
		src[i] = cand{math.Float32frombits(descKey(v)), int32(i)}
	}
	var count [1 << 11]int
	for _, shift := range [...]uint{0, 11, 22} {
		clear(count[:])
		for _, c := range src {
			count[math.Float32bits(c.logit)>>shift&(1<<11-1)]++
		}
		if count[math.Float32bits(src[0].logit)>>shift&(1<<11-1)] == n {
			continue // every key shares this digit
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, c := range src {
			d := math.Float32bits(c.logit) >> shift & (1<<11 - 1)
			dst[count[d]] = c
			count[d]++
		}
		src, dst = dst, src
	}
	if cap(big.ids) < n {
		big.ids = make([]int32, n)
	}
	ids := big.ids[:n]
	for i, c := range src {
		ids[i] = c.id
	}
	return ids
}

// descKey maps a logit to a uint32 that sorts ascending as the logit sorts descending, with
// -0 equal to +0 (they tie, as in the list order).
func descKey(v float32) uint32 {
	b := math.Float32bits(v)
	if b == 1<<31 {
		b = 0
	}
	if b>>31 != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return ^b
}

// topLogprobs returns the len(dst) most likely tokens (fewer when the rest are at -inf) in
// dst, best first (ties by id), with logprob(i) = float64(logits[i]) - lse. One pass: a token
// enters only when it beats the current n-th, and the n-th leaves.
func topLogprobs(dst []TokenLogprob, logits []float32, lse float64) []TokenLogprob {
	n := min(len(dst), len(logits))
	out := dst[:0]
	thr := math.Inf(-1) // a token must be above this to enter; -inf tokens never do
	for i, l := range logits {
		v := float64(l) - lse
		if !(v > thr) {
			if len(out) == n || math.IsInf(v, -1) {
				continue
			}
		}
		j := len(out)
		for j > 0 && float64(out[j-1].Logprob) < v {
			j--
		}
		if len(out) < n {
			out = append(out, TokenLogprob{})
		}
		copy(out[j+1:], out[j:]) // the last one drops out when out is full
		out[j] = TokenLogprob{ID: int32(i), Logprob: float32(v)}
		if len(out) == n {
			thr = float64(out[n-1].Logprob)
		}
	}
	return out
}
