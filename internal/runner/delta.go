package runner

import "strings"

// deltaText gathers the text of one engine output (a batch of tokens) for onDelta. With one
// token per output, the usual case, its one piece passes through as it is (the tokenizer's
// piece string, uncopied); only several pieces are joined.
type deltaText struct {
	first string
	n     int // non-empty pieces added
	b     strings.Builder
}

func (d *deltaText) Reset() { d.first, d.n = "", 0; d.b.Reset() }

func (d *deltaText) WriteString(s string) {
	switch {
	case s == "":
		return
	case d.n == 0:
		d.first = s
	case d.n == 1:
		d.b.WriteString(d.first)
		d.b.WriteString(s)
	default:
		d.b.WriteString(s)
	}
	d.n++
}

func (d *deltaText) Len() int {
	if d.n <= 1 {
		return len(d.first)
	}
	return d.b.Len()
}

func (d *deltaText) String() string {
	if d.n <= 1 {
		return d.first
	}
	return d.b.String()
}
