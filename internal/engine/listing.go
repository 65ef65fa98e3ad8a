package engine

import "stockpot/internal/prefix"

// CachedBlock is one block the working pool indexes, for the dashboard's tree of cached
// prefixes (a listing of its own: the cache admin API has another).
type CachedBlock struct {
	Hash, Parent, Root prefix.Hash
	Depth              int
	Hits               uint32  // reuses since the block was stored
	Tokens             []int32 // the block's first tokens (at most Config.BlockSize); owned by the caller
}

// CachedBlocks lists the working pool's indexed blocks, read on the runner goroutine (the
// prefix cache is the runner's), each with its first `tokens` tokens copied out (0: none).
func (e *Engine) CachedBlocks(tokens int) []CachedBlock {
	var out []CachedBlock
	e.do(func() {
		e.cache.Live(func(ev prefix.Event) {
			b := CachedBlock{Hash: ev.Hash, Parent: ev.Parent, Root: ev.Root, Depth: int(ev.Depth), Hits: ev.Hits}
			if tokens > 0 {
				b.Tokens = append([]int32(nil), ev.Tokens[:min(tokens, len(ev.Tokens))]...)
			}
			out = append(out, b)
		})
	})
	return out
}
