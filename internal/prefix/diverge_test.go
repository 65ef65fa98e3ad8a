package prefix

import "github.com/cockroachdb/datadriven"

// diverge probes how far tokens match (without taking references, so the script's blocks
// stay as they are) and prints what Diverge says about the rest:
//
//	diverge [salt=S] tokens=(...) [max=N]
func (s *scenario) diverge(d *datadriven.TestData) {
	root := Root(testIdentity, s.salt(d))
	tokens := parseTokens(s.t, d)
	maxTokens := 64
	if d.HasArg("max") {
		d.ScanArgs(s.t, "max", &maxTokens)
	}
	hashes := BlockHashes(root, tokens, s.c.BlockSize())
	matched := 0
	for matched < min(len(hashes), MaxMatchBlocks(len(tokens), s.c.BlockSize())) {
		if b, ok := s.c.index[hashes[matched]]; !ok || s.c.meta[b].state != stateLive {
			break
		}
		matched++
	}
	dv := s.c.Diverge(root, hashes, tokens, matched, maxTokens)
	s.printf("matched %d blocks: %s at block %d offset %d", matched, dv.Kind, dv.Block, dv.Offset)
	if dv.Cached != nil {
		s.printf(" cached %v", dv.Cached)
	}
	s.printf("\n")
}
