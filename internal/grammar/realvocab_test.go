package grammar

import (
	"sync"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/tokenizer"
)

var (
	qwenOnce  sync.Once
	qwenVocab *Vocab
	qwenTok   *tokenizer.Tokenizer
	qwenErr   error
)

// qwen2Vocab is the real Qwen2 vocabulary (151,936 tokens) from the llama.cpp bundle: every
// token's bytes as the tokenizer renders them, control tokens excluded, the EOG tokens as ends.
func qwen2Vocab(t testing.TB) (*Vocab, *tokenizer.Tokenizer) {
	t.Helper()
	qwenOnce.Do(func() {
		data, err := llamaref.SourceFile("models/ggml-vocab-qwen2.gguf")
		if err != nil {
			qwenErr = err
			return
		}
		f, err := gguf.Parse(data)
		if err != nil {
			qwenErr = err
			return
		}
		qwenTok, err = tokenizer.FromGGUF(f)
		if err != nil {
			qwenErr = err
			return
		}
		qwenVocab = VocabFromTokenizer(qwenTok)
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenVocab, qwenTok
}
