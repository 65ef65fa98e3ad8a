package dashboard

import (
	"cmp"
	"slices"

	"stockpot/internal/prefix"
)

// Block is one cached block, as the tree needs it.
type Block struct {
	Hash, Parent prefix.Hash
	Depth        int
	Hits         uint32
	Pinned       bool
	Tokens       []int32 // the block's first tokens, for a preview
}

// Node is one run of blocks in the tree of cached prefixes: blocks that follow one another
// with no branch between them are one node (a shared system prompt is one node, however
// long), and a node's children are the branches after it.
type Node struct {
	Hash       string  `json:"hash"` // the first block's hash (short)
	FirstBlock int     `json:"first_block"`
	Blocks     int     `json:"blocks"`  // blocks in this run
	Tokens     int     `json:"tokens"`  // tokens from the prompt's start through the run
	Hits       uint32  `json:"hits"`    // reuses of the run's first block
	Pinned     int     `json:"pinned"`  // pinned blocks in the run
	Subtree    int     `json:"subtree"` // blocks in the run and everything below it
	Preview    []int32 `json:"-"`       // the first block's first tokens
	Text       string  `json:"text"`    // Preview decoded (set by the caller)
	Children   []*Node `json:"children,omitempty"`
	MoreBelow  int     `json:"more,omitempty"` // children left out (MaxChildren)
}

// Tree builds the tree of cached prefixes from blocks (any order), keeping the maxRoots chains
// with the most blocks and at most maxChildren branches per node (the busiest). Blocks whose
// parent is not cached (an orphan after an eviction upstream) start chains of their own.
func Tree(blocks []Block, blockSize, maxRoots, maxChildren int) []*Node {
	byHash := make(map[prefix.Hash]int, len(blocks))
	for i, b := range blocks {
		byHash[b.Hash] = i
	}
	kids := map[prefix.Hash][]int{}
	var roots []int
	for i, b := range blocks {
		if _, ok := byHash[b.Parent]; ok && !b.Parent.IsZero() {
			kids[b.Parent] = append(kids[b.Parent], i)
		} else {
			roots = append(roots, i)
		}
	}
	var build func(i int) *Node
	build = func(i int) *Node {
		b := blocks[i]
		n := &Node{Hash: b.Hash.Short(), FirstBlock: b.Depth, Hits: b.Hits, Preview: b.Tokens}
		for {
			n.Blocks++
			if b.Pinned {
				n.Pinned++
			}
			ks := kids[b.Hash]
			if len(ks) != 1 {
				for _, k := range ks {
					n.Children = append(n.Children, build(k))
				}
				break
			}
			b = blocks[ks[0]]
		}
		n.Tokens = (n.FirstBlock + n.Blocks) * blockSize
		n.Subtree = n.Blocks
		for _, c := range n.Children {
			n.Subtree += c.Subtree
		}
		slices.SortFunc(n.Children, busiest)
		if len(n.Children) > maxChildren {
			n.MoreBelow = len(n.Children) - maxChildren
			n.Children = n.Children[:maxChildren]
		}
		return n
	}
	out := make([]*Node, 0, len(roots))
	for _, r := range roots {
		out = append(out, build(r))
	}
	slices.SortFunc(out, busiest)
	return out[:min(len(out), maxRoots)]
}

// busiest orders nodes by subtree size, then hits, then hash (for a stable page).
func busiest(a, b *Node) int {
	if c := cmp.Compare(b.Subtree, a.Subtree); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Hits, a.Hits); c != 0 {
		return c
	}
	return cmp.Compare(a.Hash, b.Hash)
}

// Walk calls fn for every node of the trees, parents first.
func Walk(nodes []*Node, fn func(*Node)) {
	for _, n := range nodes {
		fn(n)
		Walk(n.Children, fn)
	}
}
