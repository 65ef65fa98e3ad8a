package membudget

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScript runs testdata/budget.txt. Commands:
//
//	new cap=N                 a fresh budget
//	acquire name n=N          Acquire in its own goroutine; prints granted or waiting
//	try n=N                   TryAcquire
//	release n=N               Release; prints which waiters it granted
//	cancel name               cancels a waiting Acquire; prints what it returned
//
// Every command ends with the budget's state. Nothing waits on a clock: a goroutine's fate is
// read from the budget's own counters (a waiter is either in the queue or has returned).
func TestScript(t *testing.T) {
	var b *Budget
	type call struct {
		cancel context.CancelFunc
		done   chan error
		n      int64
	}
	calls := map[string]*call{}
	var order []string
	state := func() string {
		return fmt.Sprintf("in use %d/%d, waiting %d", b.InUse(), b.Capacity(), b.Waiting())
	}
	// settle waits until every call has returned or sits in the queue.
	settle := func() {
		for {
			pending := 0
			for _, name := range order {
				c := calls[name]
				select {
				case err := <-c.done:
					c.done <- err // put back for the reader
				default:
					pending++
				}
			}
			if pending == b.Waiting() {
				return
			}
			runtime.Gosched()
		}
	}
	arg := func(d *datadriven.TestData, key string) int64 {
		for _, a := range d.CmdArgs {
			if a.Key == key {
				n, err := strconv.ParseInt(a.Vals[0], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("%s: no %s", d.Pos, key)
		return 0
	}
	returned := func() string {
		var got []string
		keep := order[:0]
		for _, name := range order {
			c := calls[name]
			select {
			case err := <-c.done:
				if err == nil {
					got = append(got, name)
				} else {
					got = append(got, name+" ("+err.Error()+")")
				}
				c.cancel()
				delete(calls, name)
			default:
				keep = append(keep, name)
			}
		}
		order = keep
		return strings.Join(got, " ")
	}
	datadriven.RunTest(t, "testdata/budget.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "new":
			b = New(arg(d, "cap"))
			return state()
		case "acquire":
			name := d.CmdArgs[0].Key
			n := arg(d, "n")
			ctx, cancel := context.WithCancel(context.Background())
			c := &call{cancel: cancel, done: make(chan error, 1), n: n}
			calls[name] = c
			order = append(order, name)
			go func() { c.done <- b.Acquire(ctx, n) }()
			settle()
			return "returned: " + returned() + "\n" + state()
		case "try":
			return fmt.Sprintf("%v\n%s", b.TryAcquire(arg(d, "n")), state())
		case "release":
			b.Release(arg(d, "n"))
			settle()
			return "returned: " + returned() + "\n" + state()
		case "cancel":
			c := calls[d.CmdArgs[0].Key]
			c.cancel()
			c.done <- <-c.done // a cancelled Acquire always returns
			settle()
			return "returned: " + returned() + "\n" + state()
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

// TestConcurrentNeverOver: many goroutines acquiring and releasing random sizes never see the
// budget over its capacity, and all of it comes back.
func TestConcurrentNeverOver(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				n := int64((g*31+i*17)%300 + 1)
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 0 {
					cancel() // some give up at once
				}
				if err := b.Acquire(ctx, n); err != nil {
					cancel()
					if !errors.Is(err, context.Canceled) {
						t.Errorf("acquire %d: %v", n, err)
					}
					continue
				}
				if u := b.InUse(); u > worst {
					mu.Lock()
					worst = max(worst, u)
					mu.Unlock()
				}
				b.Release(n)
				cancel()
			}
		}()
	}
	wg.Wait()
	if worst > 1000 || b.InUse() != 0 || b.Waiting() != 0 {
		t.Fatalf("worst %d, in use %d, waiting %d", worst, b.InUse(), b.Waiting())
	}
}

func TestTooLargeAndMisuse(t *testing.T) {
	b := New(100)
	if err := b.Acquire(context.Background(), 101); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("101 of 100: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than held did not panic")
		}
	}()
	b.Release(1)
}
