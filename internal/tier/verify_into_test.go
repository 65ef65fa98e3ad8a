package tier_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"stockpot/internal/kvcache"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// checkInto asserts DecodeVerifyInto agrees with the oracle DecodeVerify on b: the same
// outcome, the same discard reason, and on success the K/V in dst and the same fields.
func checkInto(t *testing.T, b []byte, want tier.Want) {
	t.Helper()
	oracle, oerr := tier.DecodeVerify(b, want)
	dst := make([]byte, want.Layout.BlockBytes())
	got, err := tier.DecodeVerifyInto(b, want, dst)
	if (err == nil) != (oerr == nil) {
		t.Fatalf("DecodeVerifyInto error %v, DecodeVerify %v", err, oerr)
	}
	if err != nil {
		if tier.Reason(err) != tier.Reason(oerr) || err.Error() != oerr.Error() {
			t.Fatalf("DecodeVerifyInto: %v (%s), DecodeVerify: %v (%s)", err, tier.Reason(err), oerr, tier.Reason(oerr))
		}
		return
	}
	if &got.KV[0] != &dst[0] || len(got.KV) != len(dst) {
		t.Fatalf("record K/V does not alias dst")
	}
	if !bytes.Equal(dst, oracle.KV) {
		t.Fatalf("dst differs from the record's K/V")
	}
	if got.Hash != oracle.Hash || got.Parent != oracle.Parent || got.StateComplete != oracle.StateComplete || len(got.Aux) != len(oracle.Aux) {
		t.Fatalf("decoded %+v, oracle %+v", got, oracle)
	}
}

// checkTo asserts DecodeVerifyTo, into a Record used before (stale fields, Tokens and Aux
// arrays with room), agrees with the oracle DecodeVerify on b, with and without dst: the same
// outcome and error, and on success the same record (K/V in dst, or aliasing b), its tokens
// in the array it was given.
func checkTo(t *testing.T, b []byte, want tier.Want) {
	t.Helper()
	oracle, oerr := tier.DecodeVerify(b, want)
	for _, into := range []bool{false, true} {
		var dst []byte
		if into {
			dst = make([]byte, want.Layout.BlockBytes())
		}
		toks := make([]int32, want.Layout.BlockSize+3)
		r := &tier.Record{Hash: want.Parent, Tokens: toks, Aux: make([][]byte, 4), KV: []byte{1}, StateComplete: true,
			Layout: kvcache.Layout{BlockSize: 1}}
		err := tier.DecodeVerifyTo(r, b, want, dst)
		if (err == nil) != (oerr == nil) || err != nil && err.Error() != oerr.Error() {
			t.Fatalf("DecodeVerifyTo (into %v) error %v, DecodeVerify %v", into, err, oerr)
		}
		if err != nil {
			continue
		}
		if into && (&r.KV[0] != &dst[0] || len(r.KV) != len(dst)) {
			t.Fatalf("record K/V does not alias dst")
		}
		if &r.Tokens[0] != &toks[0] {
			t.Fatalf("tokens not decoded into the record's array")
		}
		o := oracle
		if r.Identity != o.Identity || r.Root != o.Root || r.Hash != o.Hash || r.Parent != o.Parent || r.Layout != o.Layout ||
			r.StateComplete != o.StateComplete || !slices.Equal(r.Tokens, o.Tokens) || !bytes.Equal(r.KV, o.KV) ||
			len(r.Aux) != len(oracle.Aux) || (r.Aux == nil) != (oracle.Aux == nil) {
			t.Fatalf("DecodeVerifyTo (into %v) decoded %+v, oracle %+v", into, r, oracle)
		}
		for i := range r.Aux {
			if !bytes.Equal(r.Aux[i], oracle.Aux[i]) {
				t.Fatalf("aux %d: %x, oracle %x", i, r.Aux[i], oracle.Aux[i])
			}
		}
	}
}

// A small block and one of many 256-byte rounds of the checksum's kernel, with aux state,
// round trip into dst (and into a used Record).
func TestDecodeVerifyIntoRoundTrip(t *testing.T) {
	big := kvcache.Layout{BlockSize: 16, Layers: 3, KVHeads: 2, HeadDim: 64, DType: kvcache.F16} // 24 KiB
	for _, l := range []kvcache.Layout{tiertest.SmallLayout, big} {
		r := tiertest.Chain(testIdentity, testRoot, l, 1, 11)[0]
		checkInto(t, tiertest.Encode(r), tiertest.Want(r))
		checkTo(t, tiertest.Encode(r), tiertest.Want(r))
		r.Aux = make([][]byte, l.Layers)
		r.Aux[0] = []byte{1, 2, 3}
		r.StateComplete = true
		checkInto(t, tiertest.Encode(r), tiertest.Want(r))
		checkTo(t, tiertest.Encode(r), tiertest.Want(r))
	}
}

// Every single-byte flip and every truncation fails as DecodeVerify fails (checksum), and
// every mismatch against want gives DecodeVerify's reason (DecodeVerifyInto and DecodeVerifyTo).
func TestDecodeVerifyIntoDamage(t *testing.T) {
	recs := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 2, 12)
	r := recs[1]
	b := tiertest.Encode(r)
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		checkInto(t, c, tiertest.Want(r))
		checkTo(t, c, tiertest.Want(r))
	}
	for n := range b {
		checkInto(t, b[:n], tiertest.Want(r))
		checkTo(t, b[:n], tiertest.Want(r))
	}
	bigger := tiertest.SmallLayout
	bigger.DType = kvcache.F32
	smaller := tiertest.SmallLayout
	smaller.BlockSize = 2
	for name, mod := range map[string]func(w *tier.Want){
		"hash":    func(w *tier.Want) { w.Hash = recs[0].Hash },
		"digest":  func(w *tier.Want) { w.Identity = [32]byte{9} },
		"parent":  func(w *tier.Want) { w.Parent = recs[1].Hash },
		"tokens":  func(w *tier.Want) { w.Tokens = append([]int32{}, w.Tokens...); w.Tokens[1]++ },
		"bigger":  func(w *tier.Want) { w.Layout = bigger },
		"smaller": func(w *tier.Want) { w.Layout = smaller; w.Tokens = w.Tokens[:2] },
		"state":   func(w *tier.Want) { w.NeedState = true },
	} {
		t.Run(name, func(t *testing.T) {
			w := tiertest.Want(r)
			mod(&w)
			checkInto(t, b, w)
			checkTo(t, b, w)
		})
	}
}

// FuzzDecodeVerifyInto: on any bytes, DecodeVerifyInto and DecodeVerifyTo agree with
// DecodeVerify (the oracle) for a want of the small layout, and never panic.
func FuzzDecodeVerifyInto(f *testing.F) {
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 13)[0]
	f.Add(tiertest.Encode(r))
	r.Aux = [][]byte{{1}, {2, 3}}
	r.StateComplete = true
	f.Add(tiertest.Encode(r))
	f.Add([]byte("SPKV"))
	keys := fuzzKeyring(f)
	sig, _ := r.EncodeSigned(keys)
	f.Add(sig)
	want := tiertest.Want(r)
	keyed := want
	keyed.Keys = keys
	f.Fuzz(func(t *testing.T, b []byte) {
		checkInto(t, b, want)
		checkTo(t, b, want)
		checkInto(t, b, keyed)
		checkTo(t, b, keyed)
	})
}

// TestIntoFuzzCorpusPresent keeps the checked-in corpus from silently vanishing.
func TestIntoFuzzCorpusPresent(t *testing.T) {
	if m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecodeVerifyInto", "*")); len(m) == 0 {
		t.Fatal("testdata/fuzz/FuzzDecodeVerifyInto is missing or empty")
	}
}

// TestWriteIntoFuzzCorpus regenerates testdata/fuzz/FuzzDecodeVerifyInto when
// STOCKPOT_WRITE_CORPUS=1 (after a format change).
func TestWriteIntoFuzzCorpus(t *testing.T) {
	if os.Getenv("STOCKPOT_WRITE_CORPUS") != "1" {
		t.Skip("set STOCKPOT_WRITE_CORPUS=1 to regenerate the corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeVerifyInto")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 13)[0]
	plain := tiertest.Encode(r)
	flipped := bytes.Clone(plain)
	flipped[200] ^= 1
	sig, err := r.EncodeSigned(fuzzKeyring(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"plain": plain, "flipped": flipped, "torn": plain[:len(plain)-3], "header": plain[:160], "signed": sig} {
		s := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
