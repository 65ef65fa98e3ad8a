package pipeline

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/api"
)

func TestResponseStoreBounded(t *testing.T) {
	st := NewResponseStore(ResponseStoreSize, 1<<40)
	if _, ok := st.Get("none"); ok {
		t.Fatal("empty store found an id")
	}
	for i := range ResponseStoreSize + 10 {
		st.Put(fmt.Sprintf("r%d", i), []api.ResponsesItem{{Type: api.ItemMessage, Role: "user", Text: fmt.Sprint(i)}})
		if i == ResponseStoreSize-1 {
			st.Get("r0") // read when the store is full: kept over r1..r10
		}
	}
	if n, _ := st.Usage(); n != ResponseStoreSize || len(st.mu.byID) != ResponseStoreSize {
		t.Fatalf("store holds %d/%d", n, len(st.mu.byID))
	}
	if _, ok := st.Get("r1"); ok {
		t.Error("the least recently used response was kept")
	}
	if it, ok := st.Get("r0"); !ok || it[0].Text != "0" {
		t.Error("a recently read response was dropped")
	}
	if _, ok := st.Get(fmt.Sprintf("r%d", ResponseStoreSize+9)); !ok {
		t.Error("the newest response was dropped")
	}
}

// TestResponseStoreScript steps the store through testdata/responses_store.txt: eviction
// order under the count and the byte bounds, reads that refresh, responses too large to keep.
func TestResponseStoreScript(t *testing.T) {
	var st *ResponseStore
	datadriven.RunTest(t, "testdata/responses_store.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "store":
			var count int
			var bytes int64
			d.ScanArgs(t, "count", &count)
			d.ScanArgs(t, "bytes", &bytes)
			st = NewResponseStore(count, bytes)
			return ""
		case "put":
			// put id=ID text=N [calls=K]: a user message of N bytes, then K function calls.
			var id string
			var text, calls int
			d.ScanArgs(t, "id", &id)
			d.ScanArgs(t, "text", &text)
			if d.HasArg("calls") {
				d.ScanArgs(t, "calls", &calls)
			}
			items := []api.ResponsesItem{{Type: api.ItemMessage, Role: "user", Text: strings.Repeat("x", text)}}
			for k := range calls {
				items = append(items, api.ResponsesItem{Type: api.ItemFunctionCall, CallID: fmt.Sprintf("c%d", k), Name: "f", Arguments: "{}"})
			}
			size := responseSize(id, items)
			if !st.Put(id, items) {
				return fmt.Sprintf("not stored: size %d over the budget\n%s", size, dumpStore(st))
			}
			return fmt.Sprintf("stored size %d\n%s", size, dumpStore(st))
		case "get":
			var id string
			d.ScanArgs(t, "id", &id)
			if _, ok := st.Get(id); !ok {
				return "not found\n" + dumpStore(st)
			}
			return "found\n" + dumpStore(st)
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// dumpStore lists the store from most to least recent, and checks its byte count against
// the sizes of what it holds (the oracle: a sum over the list).
func dumpStore(st *ResponseStore) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var b strings.Builder
	var sum int64
	for e := st.mu.order.Front(); e != nil; e = e.Next() {
		r := e.Value.(*storedResponse)
		fmt.Fprintf(&b, "%s ", r.id)
		sum += r.size
	}
	fmt.Fprintf(&b, "(%d responses, %d/%d bytes)", st.mu.order.Len(), st.mu.bytes, st.maxBytes)
	if sum != st.mu.bytes || len(st.mu.byID) != st.mu.order.Len() {
		fmt.Fprintf(&b, " INCONSISTENT: sum %d, %d ids", sum, len(st.mu.byID))
	}
	return b.String()
}

// TestResponseStoreBytesNeverOver: many large responses of random sizes (some larger than
// the whole budget) never take the store past its byte budget, nor its count.
func TestResponseStoreBytesNeverOver(t *testing.T) {
	const budget = 1 << 20
	st := NewResponseStore(64, budget)
	rng := rand.New(rand.NewPCG(1, 2))
	big := strings.Repeat("y", 2*budget)
	for i := range 2000 {
		n := rng.IntN(budget + budget/4)
		items := []api.ResponsesItem{{Type: api.ItemFunctionCall, CallID: big[:n/2], Name: "f", Arguments: big[:n-n/2]}}
		st.Put(fmt.Sprintf("r%d", i), items)
		if i%7 == 0 {
			st.Get(fmt.Sprintf("r%d", rng.IntN(i+1)))
		}
		count, bytes := st.Usage()
		if bytes > budget || count > 64 || bytes < 0 {
			t.Fatalf("after %d puts: %d responses, %d bytes over the budget of %d", i+1, count, bytes, budget)
		}
	}
}
