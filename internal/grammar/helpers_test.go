package grammar

import "testing"

// byteVocab has one token per byte value plus an end token (id 256).
func byteVocab() *Vocab {
	toks := make([][]byte, 257)
	for i := range 256 {
		toks[i] = []byte{byte(i)}
	}
	toks[256] = []byte("<eos>")
	return NewVocab(toks, nil, []int32{256})
}

var bytesVocab = byteVocab()

// matches reports whether g accepts exactly s.
func matches(t testing.TB, g *Grammar, s string) bool {
	t.Helper()
	m := g.NewMatcher(bytesVocab)
	if err := m.AcceptBytes([]byte(s)); err != nil {
		return false
	}
	return m.Complete()
}

func mustCompile(t testing.TB, n Node) *Grammar {
	t.Helper()
	g, err := Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
