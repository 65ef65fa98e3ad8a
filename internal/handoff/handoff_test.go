package handoff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// fakeExporter holds blocks [0, held) of any prompt, each with K/V bytes of its index.
type fakeExporter struct {
	held   int
	layout kvcache.Layout
	calls  int
}

func (f *fakeExporter) ExportBlocks(salt string, prompt []int32, from, to int, fn func(ev prefix.Event, kv, state []byte)) int {
	f.calls++
	bs := f.layout.BlockSize
	root := prefix.Root([]byte("id"), salt)
	hashes := prefix.BlockHashes(root, prompt, bs)
	n := 0
	for i := from; i < min(to, f.held); i++ {
		parent := root
		if i > 0 {
			parent = hashes[i-1]
		}
		kv := bytes.Repeat([]byte{byte(i)}, int(f.layout.BlockBytes()))
		fn(prefix.Event{Kind: prefix.Stored, Root: root, Hash: hashes[i], Parent: parent, Depth: int32(i),
			Tokens: append([]int32(nil), prompt[i*bs:(i+1)*bs]...)}, kv, nil)
		n++
	}
	return n
}

func testTransfer(blocks int) (*Transfer, kvcache.Layout) {
	l := kvcache.Layout{BlockSize: 4, Layers: 1, KVHeads: 1, HeadDim: 4, DType: kvcache.F32}
	prompt := make([]int32, blocks*l.BlockSize+1)
	for i := range prompt {
		prompt[i] = int32(i % 97)
	}
	return &Transfer{ID: "x", Root: prefix.Root([]byte("id"), "s"), Salt: "s", Prompt: prompt, Blocks: blocks}, l
}

// TestFramesRoundTrip: WriteBlocks' frames read back as the records, in order, each one
// verifying against the chain it claims; a pool that lost blocks ends the stream early.
func TestFramesRoundTrip(t *testing.T) {
	tr, l := testTransfer(40)
	codec := Codec{Identity: [32]byte{1}, Layout: l}
	for _, held := range []int{40, 23, 0} {
		ex := &fakeExporter{held: held, layout: l}
		var buf bytes.Buffer
		blocks, n, err := WriteBlocks(&buf, ex, codec, tr, 0, tr.Blocks)
		if err != nil || blocks != held || n >= int64(buf.Len()) {
			t.Fatalf("held %d: wrote %d blocks, %d bytes of %d, %v", held, blocks, n, buf.Len(), err)
		}
		hashes := prefix.BlockHashes(tr.Root, tr.Prompt, l.BlockSize)
		got, err := ReadFrames(&buf, 1<<20, tr.Blocks, func(i int, rec []byte) error {
			parent := tr.Root
			if i > 0 {
				parent = hashes[i-1]
			}
			_, err := tier.DecodeVerify(rec, tier.Want{Identity: codec.Identity, Root: tr.Root, Hash: hashes[i], Parent: parent,
				Tokens: tr.Prompt[i*4 : (i+1)*4], Layout: l})
			return err
		})
		if err != nil || got != held {
			t.Errorf("held %d: read %d frames, %v", held, got, err)
		}
	}
	// Bounds: a frame over the record bound, too many frames, a stream cut short.
	ex := &fakeExporter{held: 10, layout: l}
	var buf bytes.Buffer
	if _, _, err := WriteBlocks(&buf, ex, codec, tr, 0, 10); err != nil {
		t.Fatal(err)
	}
	all := buf.Bytes()
	for name, tc := range map[string]struct {
		b              []byte
		maxRec, frames int
	}{"record bound": {all, 16, 10}, "frame bound": {all, 1 << 20, 3}, "cut short": {all[:len(all)-7], 1 << 20, 10}, "empty": {nil, 1 << 20, 10}} {
		if _, err := ReadFrames(bytes.NewReader(tc.b), tc.maxRec, tc.frames, func(int, []byte) error { return nil }); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
}

// TestRegistry: transfers expire after the lease (counted), are forgotten once every block
// was served over any number of ranges, and the registry is bounded.
func TestRegistry(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRegistry(time.Second)
	r.Add(Transfer{ID: "a", Blocks: 10}, now)
	r.Add(Transfer{ID: "b", Blocks: 4}, now)
	if _, ok := r.Get("a", now.Add(999*time.Millisecond)); !ok {
		t.Fatal("a gone before its lease")
	}
	if _, whole := r.Served("a", 0, 6, now); whole {
		t.Error("six of ten blocks is not whole")
	}
	if _, whole := r.Served("a", 4, 6, now); !whole {
		t.Error("ranges covering all ten blocks are whole")
	}
	if _, ok := r.Get("a", now); ok {
		t.Error("a taken whole is still held")
	}
	if _, ok := r.Get("b", now.Add(2*time.Second)); ok {
		t.Error("b held past its lease")
	}
	if held, expired := r.Stats(now.Add(2 * time.Second)); held != 0 || expired != 1 {
		t.Errorf("held %d, expired %d; want 0 and 1 (b)", held, expired)
	}
	r.max = 3
	for i := range 5 {
		r.Add(Transfer{ID: fmt.Sprint("c", i), Blocks: 1}, now)
	}
	if held, _ := r.Stats(now); held != 3 {
		t.Errorf("a registry bounded at 3 holds %d", held)
	}
	if _, ok := r.Get("c0", now); ok {
		t.Error("the oldest transfer was kept past the bound")
	}
}

// TestPeers: only http(s)://host:port is a peer, and Lookup answers exactly those.
func TestPeers(t *testing.T) {
	p, err := ParsePeers([]string{"http://10.0.0.1:8100", "https://prefill-0.pool:443/"})
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := p.Lookup("10.0.0.1", 8100); !ok || u != "http://10.0.0.1:8100" {
		t.Errorf("Lookup = %q %v", u, ok)
	}
	if u, ok := p.Lookup("prefill-0.pool", 443); !ok || u != "https://prefill-0.pool:443" {
		t.Errorf("Lookup = %q %v", u, ok)
	}
	for _, miss := range []struct {
		h string
		p int
	}{{"10.0.0.1", 8101}, {"10.0.0.2", 8100}, {"169.254.169.254", 80}} {
		if _, ok := p.Lookup(miss.h, miss.p); ok {
			t.Errorf("%s:%d is not a peer", miss.h, miss.p)
		}
	}
	for _, bad := range []string{"10.0.0.1:8100", "ftp://h:1", "http://h", "http://h:1/path", "http://user@h:1", "http://h:99999"} {
		if _, err := ParsePeers([]string{bad}); err == nil {
			t.Errorf("%q accepted as a peer", bad)
		}
	}
}

// FuzzReadFrames: any byte stream ends in frames within their bounds or ErrFrame, never a
// panic or a read past its bounds.
func FuzzReadFrames(f *testing.F) {
	tr, l := testTransfer(3)
	var buf bytes.Buffer
	_, _, _ = WriteBlocks(&buf, &fakeExporter{held: 3, layout: l}, Codec{Layout: l}, tr, 0, 3)
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ReadFrames(bytes.NewReader(b), 4096, 8, func(i int, rec []byte) error {
			if len(rec) == 0 || len(rec) > 4096 || i >= 8 {
				t.Fatalf("frame %d of %d bytes passed the bounds", i, len(rec))
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrFrame) {
			t.Fatalf("error %v is not ErrFrame", err)
		}
		if n > 8 {
			t.Fatalf("%d frames", n)
		}
	})
}

// TestPullStalledPeer: a peer that answers its headers and then sends nothing ends the pull
// at Puller.Timeout with an error and no blocks (the decode computes them), never a hang.
func TestPullStalledPeer(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(release)
	tr, l := testTransfer(8)
	p := &Puller{Client: ts.Client(), Streams: 2, MaxRecord: 1 << 20, Timeout: 50 * time.Millisecond,
		Put: func(context.Context, []tier.Item) error { return nil }}
	hashes := prefix.BlockHashes(tr.Root, tr.Prompt, l.BlockSize)[:tr.Blocks]
	res, err := p.Pull(context.Background(), ts.URL, "x", tr.Root, hashes)
	if err == nil || res.Blocks != 0 {
		t.Fatalf("a stalled peer: %d blocks, %v; want none and an error", res.Blocks, err)
	}
}
