package kvevents

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestProtocol steps the subscriber's epoch/sequence protocol alone (testdata/protocol.txt).
// Commands: snapshot epoch=E seq=S | hello epoch=E | event seq=N | heartbeat seq=N | resync |
// unsupported. Each prints the verdict and the state after it.
func TestProtocol(t *testing.T) {
	p := newProtocol()
	datadriven.RunTest(t, "testdata/protocol.txt", func(t *testing.T, d *datadriven.TestData) string {
		arg := func(key string) uint64 {
			var v uint64
			d.ScanArgs(t, key, &v)
			return v
		}
		out := ""
		switch d.Cmd {
		case "new":
			p = newProtocol()
		case "snapshot":
			if p.snapshot(arg("epoch"), arg("seq")) {
				out = "restarted\n"
			}
		case "hello":
			out = p.hello(arg("epoch")).String() + "\n"
		case "event":
			out = p.event(arg("seq")).String() + "\n"
		case "heartbeat":
			out = p.heartbeat(arg("seq")).String() + "\n"
		case "resync":
			out = p.resyncAsked().String() + "\n"
		case "unsupported":
			p.unsupported()
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		return out + fmt.Sprintf("epoch=%d seq=%d need-snapshot=%t\n", p.epoch, p.seq, p.needSnapshot)
	})
}
