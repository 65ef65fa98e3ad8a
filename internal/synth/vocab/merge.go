package vocab

import "container/heap"

// The merge loop shared by both trainers. Symbols are int32 ids into strs;
// words are id sequences with corpus counts.

type pair struct{ a, b int32 }

type word struct {
	syms  []int32
	count int64
}

// merge is one learnt merge: a and b become out (out may be an id that
// already existed when two merges spell the same text).
type merge struct{ a, b, out int32 }

// pairItem is a heap entry; it is stale when count no longer matches.
type pairItem struct {
	count int64
	p     pair
}

// pairHeap orders by count descending, then (a, b) ascending: the
// deterministic tie-break.
type pairHeap []pairItem

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	if h[i].p.a != h[j].p.a {
		return h[i].p.a < h[j].p.a
	}
	return h[i].p.b < h[j].p.b
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// learnMerges merges the most frequent adjacent pair until len(*strs)
// reaches size or no pair occurs at all. strs holds the text of
// every id; index maps text to id and already holds every reserved text
// (specials, byte tokens). A merge whose text is longer than maxBytes, or
// spells a reserved text that is not a learnt token, is never taken.
// words are rewritten in place.
func learnMerges(words []word, strs *[]string, index map[string]int32, learnt map[int32]bool, size, maxBytes int) []merge {
	counts := make(map[pair]int64)
	where := make(map[pair][]int32) // word indices; may hold duplicates and stale entries
	for wi, w := range words {
		for i := 0; i+1 < len(w.syms); i++ {
			p := pair{w.syms[i], w.syms[i+1]}
			counts[p] += w.count
			where[p] = append(where[p], int32(wi))
		}
	}
	h := make(pairHeap, 0, len(counts))
	for p, c := range counts {
		h = append(h, pairItem{c, p})
	}
	heap.Init(&h) // the heap order does not depend on map order: ties are total
	forbidden := make(map[pair]bool)
	seen := make([]int32, len(words)) // seen[w] == step+1 once w is rewritten in this step
	var merges []merge
	touched := make(map[pair]bool)
	for step := int32(0); len(*strs) < size && h.Len() > 0; {
		it := heap.Pop(&h).(pairItem)
		if counts[it.p] != it.count || forbidden[it.p] {
			continue // stale
		}
		if it.count < 1 {
			break
		}
		text := (*strs)[it.p.a] + (*strs)[it.p.b]
		out, exists := index[text]
		if len(text) > maxBytes || (exists && !learnt[out]) {
			forbidden[it.p] = true
			continue
		}
		if !exists {
			out = int32(len(*strs))
			*strs = append(*strs, text)
			index[text] = out
			learnt[out] = true
		}
		merges = append(merges, merge{it.p.a, it.p.b, out})
		step++
		clear(touched)
		for _, wi := range where[it.p] {
			if seen[wi] == step {
				continue
			}
			seen[wi] = step
			w := &words[wi]
			if !contains(w.syms, it.p) {
				continue
			}
			for i := 0; i+1 < len(w.syms); i++ {
				q := pair{w.syms[i], w.syms[i+1]}
				counts[q] -= w.count
				touched[q] = true
			}
			ns := w.syms[:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == it.p.a && w.syms[i+1] == it.p.b {
					ns = append(ns, out)
					i++
				} else {
					ns = append(ns, w.syms[i])
				}
			}
			w.syms = ns
			for i := 0; i+1 < len(w.syms); i++ {
				q := pair{w.syms[i], w.syms[i+1]}
				counts[q] += w.count
				touched[q] = true
				if q.a == out || q.b == out {
					where[q] = append(where[q], int32(wi))
				}
			}
		}
		delete(where, it.p)
		for q := range touched {
			if c := counts[q]; c > 0 {
				heap.Push(&h, pairItem{c, q}) // push order does not matter: ties are total
			} else {
				delete(counts, q)
			}
		}
	}
	return merges
}

func contains(syms []int32, p pair) bool {
	for i := 0; i+1 < len(syms); i++ {
		if syms[i] == p.a && syms[i+1] == p.b {
			return true
		}
	}
	return false
}
