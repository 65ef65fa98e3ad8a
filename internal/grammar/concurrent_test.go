package grammar

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestConcurrentMatchers: matchers of one Grammar and Vocab share the lazily built tables;
// run them from several goroutines (go test -race checks the locking) and check each output
// against a matcher of its own grammar that ran alone.
func TestConcurrentMatchers(t *testing.T) {
	v, _ := qwen2Vocab(t)
	schema := boundedSchemas[1]
	shared := mustCompile(t, mustSchema(t, schema))
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			m := shared.NewMatcher(v)
			mask := make([]uint64, v.MaskWords())
			var ids, out []int32
			for !m.Done() {
				m.FillMask(mask)
				ids = allowedTokens(mask, ids)
				tok := ids[rnd.IntN(len(ids))]
				if err := m.Accept(tok); err != nil {
					t.Error(err)
					return
				}
				if v.isEOS[tok] {
					break
				}
				out = append(out, tok)
			}
			alone := mustCompile(t, mustSchema(t, schema)).NewMatcher(v)
			for _, tok := range out {
				if err := alone.Accept(tok); err != nil {
					t.Errorf("worker %d: a lone matcher rejects token %d: %v", w, tok, err)
					return
				}
			}
			if !alone.Complete() {
				t.Errorf("worker %d: output incomplete for a lone matcher", w)
			}
		}()
	}
	wg.Wait()
}
