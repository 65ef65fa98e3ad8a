package grammar

import (
	"fmt"
	"unicode/utf8"
)

// Node is one piece of a grammar: a language over bytes. Nodes are immutable values built by
// the constructors below and may be shared between grammars (a node used twice is compiled
// once). The zero Node matches nothing.
type Node struct{ n *node }

type kind uint8

const (
	kindNever   kind = iota // matches nothing (the zero Node, an empty Alt)
	kindLiteral             // lit
	kindSeq                 // kids in order
	kindAlt                 // one of kids
	kindRepeat              // kids[0] min..max times (max < 0: unbounded)
	kindChar                // one UTF-8 character in ranges
	kindUntil               // free text not containing stop, then stop (at most max characters before)
	kindRef                 // kids[0], set after construction (recursive schemas)
)

type node struct {
	kind     kind
	lit      []byte
	kids     []*node
	min, max int
	ranges   []runeRange // kindChar: sorted, disjoint
	stop     []byte      // kindUntil
	err      error       // a construction error, reported by Compile
	compiled *Grammar    // set by JSONSchema: Compile of this node returns it
}

type runeRange struct{ lo, hi rune }

// Literal matches exactly the bytes of s.
func Literal(s string) Node {
	if s == "" {
		return Seq()
	}
	return Node{&node{kind: kindLiteral, lit: []byte(s)}}
}

// Seq matches its nodes one after another. Seq() matches the empty string.
func Seq(nodes ...Node) Node {
	if len(nodes) == 1 {
		return nodes[0]
	}
	n := &node{kind: kindSeq}
	for _, x := range nodes {
		n.kids = append(n.kids, x.get())
	}
	return Node{n}
}

// Alt matches any one of its nodes. Alt() matches nothing.
func Alt(nodes ...Node) Node {
	if len(nodes) == 1 {
		return nodes[0]
	}
	n := &node{kind: kindAlt}
	for _, x := range nodes {
		n.kids = append(n.kids, x.get())
	}
	return Node{n}
}

// Optional matches n or the empty string.
func Optional(n Node) Node { return Alt(n, Seq()) }

// Repeat matches n between min and max times; max < 0 means no upper bound. The item must not
// match the empty string (Compile reports it): counts are of non-empty items.
func Repeat(n Node, min, max int) Node {
	r := &node{kind: kindRepeat, kids: []*node{n.get()}, min: min, max: max}
	switch {
	case min < 0:
		r.err = fmt.Errorf("grammar: Repeat min %d < 0", min)
	case max >= 0 && max < min:
		r.err = fmt.Errorf("grammar: Repeat max %d < min %d", max, min)
	case max == 0:
		return Seq()
	}
	return Node{r}
}

// CharsExcept matches free text of min..max UTF-8 characters (max < 0: unbounded), none of
// which is a character of exclude. The text is always valid UTF-8.
func CharsExcept(exclude string, min, max int) Node {
	return Repeat(charExcept(exclude), min, max)
}

// TextUntil matches free text that does not contain stop, followed by stop. The text before
// stop holds at most maxChars UTF-8 characters (maxChars < 0: unbounded) and is valid UTF-8.
func TextUntil(stop string, maxChars int) Node {
	n := &node{kind: kindUntil, stop: []byte(stop), max: maxChars}
	if stop == "" || !utf8.ValidString(stop) {
		n.err = fmt.Errorf("grammar: TextUntil stop %q must be non-empty valid UTF-8", stop)
	}
	return Node{n}
}

// charExcept is one character that is not in exclude (invalid UTF-8 in exclude is ignored).
func charExcept(exclude string) Node {
	var ex []runeRange
	for _, r := range exclude {
		if r != utf8.RuneError {
			ex = append(ex, runeRange{r, r})
		}
	}
	return charIn(complement(ex))
}

// charIn is one character in any of ranges.
func charIn(ranges []runeRange) Node {
	return Node{&node{kind: kindChar, ranges: normalize(ranges)}}
}

func (x Node) get() *node {
	if x.n == nil {
		return &node{kind: kindNever}
	}
	return x.n
}

// ref returns a placeholder to be bound later with bind (for recursive grammars).
func ref() Node { return Node{&node{kind: kindRef}} }

func (x Node) bind(target Node) { x.n.kids = []*node{target.get()} }
