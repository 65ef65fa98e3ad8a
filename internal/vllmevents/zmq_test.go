package vllmevents

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

func TestBinds(t *testing.T) {
	for ep, want := range map[string]bool{
		"tcp://*:5557": true, "tcp://[::]:5557": true, "tcp://0.0.0.0:5557": true, "ipc:///tmp/kv": true,
		"inproc://kv": true, "tcp://router:5557": false, "tcp://10.0.0.1:5557": false,
	} {
		if Binds(ep) != want {
			t.Errorf("Binds(%q) = %v", ep, !want)
		}
	}
}

func TestPublisherAndReplay(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:*", Replay: "tcp://127.0.0.1:*", Topic: "kv@10.0.0.1:8000@m"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial("tcp://" + p.pub.Addr().String()); err != nil {
		t.Fatal(err)
	}
	// A PUB drops what it sends before the subscription reaches it: publish until one arrives.
	got := make(chan zmq4.Msg, 100)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			got <- m
		}
	}()
	ev := []Event{{Type: TypeRemoved, BlockHashes: []uint64{42}, Medium: "GPU"}}
	var first zmq4.Msg
	deadline := time.After(20 * time.Second)
wait:
	for {
		p.Publish(ev)
		select {
		case first = <-got:
			break wait
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message")
		}
	}
	if len(first.Frames) != 3 || string(first.Frames[0]) != "kv@10.0.0.1:8000@m" || len(first.Frames[1]) != 8 {
		t.Fatalf("frames %q", first.Frames)
	}
	b, _, err := DecodeBatch(first.Frames[2])
	if err != nil || len(b.Events) != 1 || b.Events[0].BlockHashes[0] != 42 || !b.HasDPRank {
		t.Fatalf("payload %+v %v", b, err)
	}
	seq := binary.BigEndian.Uint64(first.Frames[1])

	// Replay from that sequence number: each buffered batch from it, then the end marker.
	dealer := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("t")))
	defer dealer.Close()
	if err := dealer.Dial("tcp://" + p.replay.Addr().String()); err != nil {
		t.Fatal(err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], seq)
	if err := dealer.Send(zmq4.NewMsgFrom(nil, start[:])); err != nil {
		t.Fatal(err)
	}
	want := seq
	for {
		m, err := dealer.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 {
			t.Fatalf("replay frames %q", m.Frames)
		}
		if string(m.Frames[1]) == string(EndSeq) {
			if len(m.Frames[2]) != 0 || want == seq {
				t.Fatalf("end marker after %d batches, payload %q", want-seq, m.Frames[2])
			}
			break
		}
		if s := binary.BigEndian.Uint64(m.Frames[1]); s != want {
			t.Fatalf("replayed seq %d, want %d", s, want)
		}
		if _, _, err := DecodeBatch(m.Frames[2]); err != nil {
			t.Fatal(err)
		}
		want++
	}
}
