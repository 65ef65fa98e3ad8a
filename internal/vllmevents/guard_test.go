package vllmevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// greeting is a ZMTP 3.0 NULL greeting.
func greeting() []byte {
	g := make([]byte, greetingBytes)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:], "NULL")
	return g
}

func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		h := make([]byte, 9)
		h[0] = flags | flagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// TestCheckFrames: a ZMTP stream passes through byte for byte; a frame over the bound, a
// greeting or flags that are not ZMTP 3 stop it before the bad header is passed on.
func TestCheckFrames(t *testing.T) {
	good := append(greeting(), frame(flagCommand, []byte("\x05READY"))...)
	good = append(good, frame(flagMore, []byte("kv@a:1@m"))...)
	good = append(good, frame(0, bytes.Repeat([]byte{7}, 1000))...)
	var out bytes.Buffer
	if err := CheckFrames(&out, bytes.NewReader(good), 4096); err != io.EOF || !bytes.Equal(out.Bytes(), good) {
		t.Fatalf("a good stream: %v, %d of %d bytes passed", err, out.Len(), len(good))
	}
	huge := append(greeting(), 0)
	huge[len(huge)-1] = flagLong
	huge = binary.BigEndian.AppendUint64(huge, 1<<62)
	for name, tc := range map[string]struct {
		in   []byte
		want error
		pass int
	}{
		"huge frame": {huge, ErrFrameTooLarge, greetingBytes},
		"over bound": {append(greeting(), frame(0, make([]byte, 5000))...), ErrFrameTooLarge, greetingBytes},
		"short over": {append(greeting(), frame(0, make([]byte, 200))...), ErrFrameTooLarge, greetingBytes},
		"signature":  {append([]byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, greeting()[10:]...), ErrNotZMTP, 0},
		"not ZMTP":   {[]byte("GET / HTTP/1.1\r\n\r\n"), ErrNotZMTP, 0},
		"version 2":  {func() []byte { g := greeting(); g[10] = 2; return g }(), ErrNotZMTP, 0},
		"flags":      {append(greeting(), 0x80, 1, 1), ErrNotZMTP, greetingBytes},
	} {
		var out bytes.Buffer
		max := int64(4096)
		if name == "short over" {
			max = 100
		}
		err := CheckFrames(&out, bytes.NewReader(tc.in), max)
		if !errors.Is(err, tc.want) || out.Len() > tc.pass+10 || !bytes.HasPrefix(tc.in, out.Bytes()) {
			t.Errorf("%s: %v with %d bytes passed, want %v", name, err, out.Len(), tc.want)
		}
	}
}

// TestGuardZMQ: a real PUB reaches a SUB through the guard; a peer announcing a 2^40-byte
// frame is cut (counted) and the SUB goes on receiving.
func TestGuardZMQ(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 4)
	g := NewGuard(ln, sub.Addr().String(), 1<<20)
	g.Refused = func(err error) { refused <- err }
	defer g.Close()

	attack, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	msg := append(greeting(), flagLong)
	msg = binary.BigEndian.AppendUint64(msg, 1<<40)
	attack.Write(msg)
	select {
	case err := <-refused:
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("cut for %v, want ErrFrameTooLarge", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the huge frame was not cut")
	}
	attack.Close()

	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Dial("tcp://" + g.Addr().String()); err != nil {
		t.Fatal(err)
	}
	got := make(chan zmq4.Msg, 1)
	go func() {
		m, err := sub.Recv()
		if err == nil {
			got <- m
		}
	}()
	deadline := time.After(time.Minute)
	for {
		// A PUB drops what it sends before the subscription reaches it: send until one arrives.
		_ = pub.Send(zmq4.NewMsgFrom([]byte("kv@a:1@m"), []byte("payload")))
		select {
		case m := <-got:
			if string(m.Frames[1]) != "payload" {
				t.Fatalf("frames %q", m.Frames)
			}
			return
		case <-deadline:
			t.Fatal("nothing reached the SUB through the guard")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FuzzCheckFrames: whatever a peer sends, what passes is a prefix of it, and the call ends
// with the input's end or a ZMTP error, never a panic.
func FuzzCheckFrames(f *testing.F) {
	f.Add(append(greeting(), frame(0, []byte("x"))...))
	f.Add(append(greeting(), flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		err := CheckFrames(&out, bytes.NewReader(b), 1024)
		if !bytes.HasPrefix(b, out.Bytes()) {
			t.Fatalf("passed bytes that are not a prefix of the input")
		}
		if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrNotZMTP) {
			t.Fatalf("error %v", err)
		}
	})
}
