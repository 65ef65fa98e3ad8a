package pipeline

import (
	"container/list"
	"fmt"
	"net/http"
	"sync"
	"unsafe"

	"stockpot/internal/api"
)

// A Responses request's previous_response_id continues an earlier response: its input and
// output items come before the new input. The server keeps them in a ResponseStore, the
// only memory that outlives a request on the client's say, bounded by count and by bytes.

// ResponseStoreSize is how many responses a server keeps for previous_response_id.
const ResponseStoreSize = 1024

// Accounting of the store's bytes (responseSize): each string counts its length, and each
// item and each entry a fixed overhead for what holds them.
const (
	// storedItemOverhead is an api.ResponsesItem's own size: seven string headers.
	storedItemOverhead = int64(unsafe.Sizeof(api.ResponsesItem{}))
	// storedEntryOverhead is what one entry costs beside its items: the storedResponse, its
	// list element and its map entry (about 40+48+48 bytes on 64-bit), rounded up.
	storedEntryOverhead = 160
)

// ResponseStore keeps the items (input and output) of recent responses, dropping the least
// recently used to hold at most maxCount responses and maxBytes of them (responseSize). A
// response larger than maxBytes on its own is not stored. The store is the only memory that
// outlives a request on the client's say, so both bounds hold whatever clients send.
type ResponseStore struct {
	maxCount int   // > 0
	maxBytes int64 // >= 0; 0 stores nothing
	mu       struct {
		sync.Mutex
		order *list.List               // front: most recent; values are *storedResponse
		byID  map[string]*list.Element // id -> element of order
		bytes int64                    // sum of size over order; <= maxBytes
	}
}

// NewResponseStore returns a store of at most maxCount responses and maxBytes of them.
func NewResponseStore(maxCount int, maxBytes int64) *ResponseStore {
	st := &ResponseStore{maxCount: maxCount, maxBytes: max(maxBytes, 0)}
	st.mu.order = list.New()
	st.mu.byID = map[string]*list.Element{}
	return st
}

type storedResponse struct {
	id    string
	items []api.ResponsesItem
	size  int64 // responseSize(id, items)
}

// responseSize is what the store charges for a response: its strings by length, plus the
// fixed overheads. Items carried over from an earlier response (previous_response_id) share
// their strings with it but are charged again: the count errs high, never low, so the
// budget bounds the memory even when the earlier response is gone.
func responseSize(id string, items []api.ResponsesItem) int64 {
	n := storedEntryOverhead + int64(len(id))
	for i := range items {
		it := &items[i]
		n += storedItemOverhead + int64(len(it.Type)+len(it.Role)+len(it.Text)+len(it.CallID)+len(it.Name)+len(it.Arguments)+len(it.Output))
	}
	return n
}

// Get returns the items stored under id, which becomes the most recently used.
func (st *ResponseStore) Get(id string) ([]api.ResponsesItem, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.mu.byID[id]
	if !ok {
		return nil, false
	}
	st.mu.order.MoveToFront(e)
	return e.Value.(*storedResponse).items, true
}

// Put stores items under id, evicting the least recently used responses until both bounds
// hold. It reports false, storing nothing, for a response larger than the whole byte budget.
// The store keeps items (the caller must not change them after).
func (st *ResponseStore) Put(id string, items []api.ResponsesItem) bool {
	size := responseSize(id, items)
	if size > st.maxBytes {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if e, ok := st.mu.byID[id]; ok {
		st.removeLocked(e)
	}
	st.mu.byID[id] = st.mu.order.PushFront(&storedResponse{id: id, items: items, size: size})
	st.mu.bytes += size
	for st.mu.order.Len() > st.maxCount || st.mu.bytes > st.maxBytes {
		st.removeLocked(st.mu.order.Back())
	}
	return true
}

// removeLocked drops one entry. REQUIRES: st.mu held.
func (st *ResponseStore) removeLocked(e *list.Element) {
	r := st.mu.order.Remove(e).(*storedResponse)
	delete(st.mu.byID, r.id)
	st.mu.bytes -= r.size
}

// Usage returns the responses stored and the bytes charged for them.
func (st *ResponseStore) Usage() (count int, bytes int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.mu.order.Len(), st.mu.bytes
}

// NotFound is the 404 for a previous_response_id the store does not hold.
func (st *ResponseStore) NotFound(id string) *api.Error {
	return &api.Error{Status: http.StatusNotFound, Type: api.TypeInvalidRequest, Code: "previous_response_not_found",
		Param: "previous_response_id", Message: fmt.Sprintf("previous response with id %s not found: it was not stored (store was false, "+
			"or it was over this server's whole store of %d bytes, --responses-store-bytes), or it was dropped to keep the last %d responses within that budget",
			api.Quote(id), st.maxBytes, st.maxCount)}
}
