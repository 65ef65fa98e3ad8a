package tier_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

var (
	testIdentity = [32]byte{1, 2, 3}
	testRoot     = prefix.Root(testIdentity[:], "")
)

func TestRoundTrip(t *testing.T) {
	for _, aux := range []bool{false, true} {
		r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 1)[0]
		if aux {
			r.Aux = [][]byte{{1, 2, 3}, {}}
			r.StateComplete = true
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != r.EncodedSize() {
			t.Fatalf("encoded %d bytes, EncodedSize %d", len(b), r.EncodedSize())
		}
		got, err := tier.DecodeVerify(b, tiertest.Want(r))
		if err != nil {
			t.Fatalf("aux %v: %v", aux, err)
		}
		if got.Identity != r.Identity || got.Parent != r.Parent || got.StateComplete != r.StateComplete ||
			!bytes.Equal(got.KV, r.KV) || len(got.Aux) != len(r.Aux) {
			t.Fatalf("aux %v: decoded %+v, want %+v", aux, got, r)
		}
		for i := range r.Aux {
			if !bytes.Equal(got.Aux[i], r.Aux[i]) {
				t.Fatalf("aux %d: %v, want %v", i, got.Aux[i], r.Aux[i])
			}
		}
	}
}

// The trailer is hash/crc32's CRC-32C of the bytes before it, whichever path package crc32c
// took, so records written before it and after it read alike.
func TestEncodeTrailerIsCRC32C(t *testing.T) {
	table := crc32.MakeTable(crc32.Castagnoli)
	big := kvcache.Layout{BlockSize: 16, Layers: 3, KVHeads: 2, HeadDim: 64, DType: kvcache.F16}
	for _, l := range []kvcache.Layout{tiertest.SmallLayout, big} {
		for _, r := range tiertest.Chain(testIdentity, testRoot, l, 3, 5) {
			b := tiertest.Encode(r)
			body := b[:len(b)-4]
			if got, want := binary.LittleEndian.Uint32(b[len(body):]), crc32.Checksum(body, table); got != want {
				t.Fatalf("%v: trailer %08x, hash/crc32 %08x", l, got, want)
			}
			if _, err := tier.Decode(b); err != nil {
				t.Fatalf("%v: %v", l, err)
			}
		}
	}
}

func TestEncodeRefusesBadRecords(t *testing.T) {
	good := func() *tier.Record { return tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 2)[0] }
	for name, mod := range map[string]func(r *tier.Record){
		"short tokens": func(r *tier.Record) { r.Tokens = r.Tokens[:1] },
		"short kv":     func(r *tier.Record) { r.KV = r.KV[:10] },
		"aux count":    func(r *tier.Record) { r.Aux = make([][]byte, 1<<16+1) },
		"bad layout":   func(r *tier.Record) { r.Layout.Layers = 0 },
	} {
		r := good()
		mod(r)
		if _, err := r.Encode(); err == nil {
			t.Errorf("%s: Encode accepted a bad record", name)
		}
	}
}

// Flipping any single byte must fail Decode: a torn or rotted record is
// never served.
func TestEveryByteFlipIsCaught(t *testing.T) {
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 3)[0]
	r.Aux = [][]byte{{9}, {8, 7}}
	b := tiertest.Encode(r)
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := tier.Decode(c); err == nil {
			t.Fatalf("flip at byte %d accepted", i)
		} else if tier.Reason(err) != tier.ReasonChecksum {
			t.Fatalf("flip at byte %d: reason %q (%v), want checksum", i, tier.Reason(err), err)
		}
	}
	for n := range b {
		if _, err := tier.Decode(b[:n]); err == nil {
			t.Fatalf("truncated to %d bytes accepted", n)
		}
	}
}

func TestVerifyReasons(t *testing.T) {
	recs := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 2, 4)
	r := recs[1]
	other := prefix.Root([]byte("other model"), "")
	bigger := tiertest.SmallLayout
	bigger.DType = kvcache.F32
	tests := []struct {
		name       string
		mod        func(w *tier.Want)
		want       error
		wantReason string
	}{
		{"ok", func(w *tier.Want) {}, nil, ""},
		{"root", func(w *tier.Want) { w.Root = other }, tier.ErrIdentity, tier.ReasonIdentity},
		{"hash", func(w *tier.Want) { w.Hash = recs[0].Hash }, tier.ErrIdentity, tier.ReasonIdentity},
		{"digest", func(w *tier.Want) { w.Identity = [32]byte{9} }, tier.ErrIdentity, tier.ReasonIdentity},
		{"parent", func(w *tier.Want) { w.Parent = recs[1].Hash }, tier.ErrIdentity, tier.ReasonIdentity},
		{"tokens", func(w *tier.Want) { w.Tokens = append([]int32{}, w.Tokens...); w.Tokens[2]++ }, tier.ErrTokens, tier.ReasonIdentity},
		{"token count", func(w *tier.Want) { w.Tokens = w.Tokens[:2] }, tier.ErrTokens, tier.ReasonIdentity},
		{"shape", func(w *tier.Want) { w.Layout = bigger }, tier.ErrShape, tier.ReasonIdentity},
		{"state", func(w *tier.Want) { w.NeedState = true }, tier.ErrIncompleteState, tier.ReasonIncompleteState},
	}
	for _, tt := range tests {
		w := tiertest.Want(r)
		tt.mod(&w)
		err := tier.Verify(r, w)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
			continue
		}
		if err != nil && tier.Reason(err) != tt.wantReason {
			t.Errorf("%s: Reason = %q, want %q", tt.name, tier.Reason(err), tt.wantReason)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 5)[0]
	f.Add(tiertest.Encode(r))
	r.Aux = [][]byte{{1}, {2, 3}}
	r.StateComplete = true
	f.Add(tiertest.Encode(r))
	r.Aux = [][]byte{bytes.Repeat([]byte("SPST"), 9)} // a hybrid's one checkpoint
	f.Add(tiertest.Encode(r))
	f.Add([]byte("SPKV"))
	keys := fuzzKeyring(f)
	for _, r := range tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 2, 5) {
		b, _ := r.EncodeSigned(keys)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := tier.Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes.
		again, err := rec.Encode()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
		// With the keys, only a record one of them signed is authentic: any other is forged,
		// and so is any change to an authentic one, whatever its CRC says.
		w := tiertest.Want(rec)
		w.Keys = keys
		_, err = tier.DecodeVerify(b, w)
		if !rec.Signed || rec.Sig.KeyID != keys.SigningID() {
			if tier.Reason(err) != tier.ReasonForged {
				t.Fatalf("a record the keys did not sign: %v, want forged", err)
			}
			return
		}
		if err != nil {
			if tier.Reason(err) != tier.ReasonForged {
				t.Fatalf("signed by the key: %v (reason %q)", err, tier.Reason(err))
			}
			return
		}
		c := bytes.Clone(b)
		i := int(binary.LittleEndian.Uint32(c[len(c)-4:])) % (len(c) - 4)
		c[i] ^= 0x80
		binary.LittleEndian.PutUint32(c[len(c)-4:], crc32.Checksum(c[:len(c)-4], crc32.MakeTable(crc32.Castagnoli)))
		if _, err := tier.DecodeVerify(c, w); err == nil {
			t.Fatalf("byte %d of an authentic record changed, CRC rewritten: accepted", i)
		}
	})
}

// fuzzKeyring is the fuzz targets' keys: one, fixed, so the checked-in corpus's signed
// records verify.
func fuzzKeyring(t testing.TB) *tier.Keyring {
	k, err := tier.NewKeyring([][]byte{[]byte("stockpot fuzz corpus tier key 01")})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestFuzzCorpusPresent keeps the checked-in corpus from silently vanishing.
func TestFuzzCorpusPresent(t *testing.T) {
	m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if len(m) == 0 {
		if _, err := os.Stat("testdata"); err != nil {
			t.Fatal("testdata/fuzz/FuzzDecode is missing")
		}
		t.Fatal("testdata/fuzz/FuzzDecode is empty")
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzDecode when
// STOCKPOT_WRITE_CORPUS=1 (after a format change).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("STOCKPOT_WRITE_CORPUS") != "1" {
		t.Skip("set STOCKPOT_WRITE_CORPUS=1 to regenerate the corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := tiertest.Chain(testIdentity, testRoot, kvcache.Layout{BlockSize: 2, Layers: 1, KVHeads: 1, HeadDim: 2, DType: kvcache.F16}, 1, 6)[0]
	plain := tiertest.Encode(r)
	r.Aux = [][]byte{{7, 7}}
	r.StateComplete = true
	aux := tiertest.Encode(r)
	torn := bytes.Clone(plain[:len(plain)-5])
	r.Aux, r.StateComplete = nil, false
	sig, err := r.EncodeSigned(fuzzKeyring(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"plain": plain, "aux": aux, "torn": torn, "header": plain[:160], "signed": sig} {
		s := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
