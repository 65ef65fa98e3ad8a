package lru

// Node is one element; embed it in the entry and set Value to the entry.
// A Node is in at most one List or Pins at a time.
type Node[T any] struct {
	prev, next *Node[T] // nil while not in a list
	Value      T
	pin        pinState // see Pins
}

// List is a recency list. The zero List is empty and ready to use.
type List[T any] struct {
	root Node[T] // sentinel: root.next is the front (most recent), root.prev the back
	n    int
}

func (l *List[T]) lazyInit() {
	if l.root.next == nil {
		l.root.next, l.root.prev = &l.root, &l.root
	}
}

// Len returns the number of nodes in l.
func (l *List[T]) Len() int { return l.n }

// PushFront inserts n as the most recent.
// REQUIRES: n is in no list.
func (l *List[T]) PushFront(n *Node[T]) {
	if n.next != nil || n.pin.idx != 0 {
		panic("lru: PushFront of a node already in a list")
	}
	l.lazyInit()
	n.prev, n.next = &l.root, l.root.next
	n.prev.next, n.next.prev = n, n
	l.n++
}

// Remove takes n out of l.
// REQUIRES: n is in l.
func (l *List[T]) Remove(n *Node[T]) {
	if n.next == nil {
		panic("lru: Remove of a node in no list")
	}
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
	l.n--
}

// MoveToFront marks n as the most recent.
// REQUIRES: n is in l.
func (l *List[T]) MoveToFront(n *Node[T]) {
	l.Remove(n)
	l.PushFront(n)
}

// PushBack inserts n as the least recent (an expired pin: its last use is a TTL ago).
// REQUIRES: n is in no list.
func (l *List[T]) PushBack(n *Node[T]) {
	if n.next != nil || n.pin.idx != 0 {
		panic("lru: PushBack of a node already in a list")
	}
	l.lazyInit()
	n.prev, n.next = l.root.prev, &l.root
	n.prev.next, n.next.prev = n, n
	l.n++
}

// Back returns the least recent node, or nil if l is empty.
func (l *List[T]) Back() *Node[T] {
	if l.n == 0 {
		return nil
	}
	return l.root.prev
}

// Front returns the most recent node, or nil if l is empty.
func (l *List[T]) Front() *Node[T] {
	if l.n == 0 {
		return nil
	}
	return l.root.next
}

// Next returns the node after n towards the back, or nil at the back.
// REQUIRES: n is in l.
func (l *List[T]) Next(n *Node[T]) *Node[T] {
	if n.next == &l.root {
		return nil
	}
	return n.next
}

// Prev returns the node before n towards the front, or nil at the front (for walks from the
// back: the least recent first).
// REQUIRES: n is in l.
func (l *List[T]) Prev(n *Node[T]) *Node[T] {
	if n.prev == &l.root {
		return nil
	}
	return n.prev
}

// Oldest returns the least recent node whose value satisfies ok, or nil: the walk a store
// makes to find a victim of a kind (an owner over its budget) before its plain least recent.
func (l *List[T]) Oldest(ok func(T) bool) *Node[T] {
	for n := l.Back(); n != nil; n = l.Prev(n) {
		if ok(n.Value) {
			return n
		}
	}
	return nil
}
