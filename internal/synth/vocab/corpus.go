package vocab

import (
	_ "embed"
	"sync"
)

//go:embed corpus/go_prose.txt
var goProse string

//go:embed corpus/go_code.txt
var goCode string

var corpusOnce = sync.OnceValue(func() string {
	return goProse + "\n" + goCode + "\n" + generatedCorpus()
})

// Corpus returns the training text: Go documentation prose, Go code and the
// generated text, in that order. It is built once and shared.
func Corpus() string { return corpusOnce() }
