package grammar

// TokenSource is what VocabFromTokenizer needs from a tokenizer (*tokenizer.Tokenizer has it).
type TokenSource interface {
	VocabSize() int
	Piece(id int32) []byte // the bytes token id stands for
	IsControl(id int32) bool
	EOGs() []int32
}

// VocabFromTokenizer builds the Vocab of a tokenizer: each token's bytes, control tokens
// excluded, the end-of-generation tokens as the end tokens.
func VocabFromTokenizer(t TokenSource) *Vocab {
	n := t.VocabSize()
	toks := make([][]byte, n)
	allowed := make([]bool, n)
	for i := range n {
		toks[i] = t.Piece(int32(i))
		allowed[i] = !t.IsControl(int32(i))
	}
	return NewVocab(toks, allowed, t.EOGs())
}
