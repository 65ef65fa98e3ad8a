package router

import (
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestVLLMEventsFrameGuard: a peer that reaches --kv-events-listen and announces a frame of
// 2^40 bytes (the ZeroMQ library would allocate it) or sends bytes that are not ZMTP is cut,
// counted, and the router and its SUB go on.
func TestVLLMEventsFrameGuard(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{}`)) }))
	defer be.Close()
	rt := newZMQRouter(t, "kv-aware", []string{be.URL}, 1000)
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10] = 0xFF, 0x7F, 3
	copy(greeting[12:], "NULL")
	for _, attack := range [][]byte{
		binary.BigEndian.AppendUint64(append(append([]byte(nil), greeting...), 2), 1<<40),
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	} {
		c, err := net.Dial("tcp", rt.KVEventsAddr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(attack)
		c.Close()
	}
	lbl := func(reason string) map[string]string {
		return map[string]string{"backend": "unknown", "reason": reason}
	}
	waitUntil(t, "both connections cut and counted", func() bool {
		return zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("frame_too_large")) == 1 &&
			zmqCounter(t, rt, "stockpot_router_kv_zmq_rejected_total", lbl("not_zmtp")) == 1
	})
	// The router still answers and its SUB still takes events (TestVLLMEventsRouting covers
	// the index through the same guarded address).
	if resp, err := http.Get(httptest.NewServer(rt.Handler()).URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("router after the attacks: %v %v", resp, err)
	}
}
