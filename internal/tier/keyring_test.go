package tier_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// testKeyring returns a Keyring over secrets made from seeds (32 bytes each).
func testKeyring(t testing.TB, seeds ...byte) *tier.Keyring {
	t.Helper()
	var secrets [][]byte
	for _, s := range seeds {
		secrets = append(secrets, bytes.Repeat([]byte{s}, 32))
	}
	k, err := tier.NewKeyring(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signed(t testing.TB, r *tier.Record, k *tier.Keyring) []byte {
	t.Helper()
	b, err := r.EncodeSigned(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forge is the probe's forgery: another prompt's block (its K/V) under the victim's key,
// hash, parent and tokens, with a CRC that matches — a self-consistent, unsigned record.
func forge(victim, other *tier.Record) []byte {
	f := *victim
	f.KV = other.KV
	f.Signed = false
	return tiertest.Encode(&f)
}

// The MAC trailer round-trips: a signed record verifies under its keyring, decodes to the
// same fields, re-encodes to its own bytes, keeps its CRC-32C last, and its size is
// EncodedSize.
func TestSignedRoundTrip(t *testing.T) {
	k := testKeyring(t, 1)
	table := crc32.MakeTable(crc32.Castagnoli)
	for _, aux := range []bool{false, true} {
		r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 21)[0]
		if aux {
			r.Aux, r.StateComplete = [][]byte{{1, 2, 3}}, true
		}
		b := signed(t, r, k)
		if want := r.EncodedSize() + tier.SignatureSize; len(b) != want {
			t.Fatalf("signed record of %d bytes, want %d", len(b), want)
		}
		if got, want := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(b[:len(b)-4], table); got != want {
			t.Fatalf("trailer %08x, CRC-32C %08x", got, want)
		}
		w := tiertest.Want(r)
		w.Keys = k
		got, err := tier.DecodeVerify(b, w)
		if err != nil {
			t.Fatalf("aux %v: %v", aux, err)
		}
		if !got.Signed || got.Sig.KeyID != k.SigningID() || !bytes.Equal(got.KV, r.KV) || len(got.Aux) != len(r.Aux) {
			t.Fatalf("aux %v: decoded %+v", aux, got)
		}
		if got.EncodedSize() != len(b) {
			t.Fatalf("decoded EncodedSize %d, %d bytes", got.EncodedSize(), len(b))
		}
		if again := tiertest.Encode(got); !bytes.Equal(again, b) {
			t.Fatalf("a decoded signed record re-encodes differently")
		}
		checkInto(t, b, w)
		checkTo(t, b, w)
		// Without keys (none configured) a signed record reads as before.
		if _, err := tier.DecodeVerify(b, tiertest.Want(r)); err != nil {
			t.Fatalf("signed record without keys: %v", err)
		}
	}
	// Two signings of one record differ (a fresh nonce each) and both verify.
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 22)[0]
	if bytes.Equal(signed(t, r, k), signed(t, r, k)) {
		t.Fatal("two signatures of one record are the same bytes: the nonce is not fresh")
	}
	// EncodeSigned(nil) is the unsigned encoding.
	if u := signed(t, r, nil); !bytes.Equal(u, tiertest.Encode(r)) {
		t.Fatal("EncodeSigned(nil) differs from Encode")
	}
}

// The probe's forgery and its variants are discarded as forged once a key is configured
// (and, the attack the MAC closes, restored without one); honest records restore.
func TestForgedRecords(t *testing.T) {
	k := testKeyring(t, 1)
	victim := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 2, 31)[1]
	other := tiertest.Chain(testIdentity, prefix.Root(testIdentity[:], "other tenant"), tiertest.SmallLayout, 1, 32)[0]
	w := tiertest.Want(victim)
	w.Keys = k

	honest := signed(t, victim, k)
	if _, err := tier.DecodeVerify(honest, w); err != nil {
		t.Fatalf("honest record: %v", err)
	}

	unsigned := forge(victim, other)
	if _, err := tier.DecodeVerify(unsigned, tiertest.Want(victim)); err != nil {
		t.Fatalf("without a key the forgery should pass the checks that are not a MAC: %v", err)
	}

	f := *victim
	f.KV = other.KV
	byStranger := signed(t, &f, testKeyring(t, 9))

	// A signed honest record with its K/V swapped and the CRC rewritten: the tag is stale.
	swapped := bytes.Clone(honest)
	copy(swapped[160+4*victim.Layout.BlockSize:], other.KV)
	binary.LittleEndian.PutUint32(swapped[len(swapped)-4:], crc32.Checksum(swapped[:len(swapped)-4], crc32.MakeTable(crc32.Castagnoli)))

	for name, b := range map[string][]byte{"unsigned": unsigned, "unknown key": byStranger, "stale tag": swapped} {
		_, err := tier.DecodeVerify(b, w)
		if !errors.Is(err, tier.ErrForged) || tier.Reason(err) != tier.ReasonForged {
			t.Errorf("%s: DecodeVerify = %v (reason %q), want forged", name, err, tier.Reason(err))
		}
		checkInto(t, b, w)
		checkTo(t, b, w)
	}
}

// Changing any byte of a signed record and rewriting its CRC (what a forger can always do)
// fails: the MAC covers every byte before the tag, and the tag itself. A change that breaks
// the format first is malformed (checksum), any other is forged; none is restored.
func TestEveryByteOfASignedRecordIsAuthenticated(t *testing.T) {
	k := testKeyring(t, 3)
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 33)[0]
	r.Aux, r.StateComplete = [][]byte{{5, 6}}, true
	b := signed(t, r, k)
	w := tiertest.Want(r)
	w.Keys = k
	table := crc32.MakeTable(crc32.Castagnoli)
	auxStart := 160 + 4*r.Layout.BlockSize + int(r.Layout.BlockBytes())
	sigStart := len(b) - 4 - tier.SignatureSize
	for i := range len(b) - 4 {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		binary.LittleEndian.PutUint32(c[len(c)-4:], crc32.Checksum(c[:len(c)-4], table))
		_, err := tier.DecodeVerify(c, w)
		if err == nil {
			t.Fatalf("byte %d changed, CRC rewritten: accepted", i)
		}
		// The four digests, the tokens and K/V, and the signature reach the MAC (it runs
		// before Verify); the format's own fields (shape, lengths) may be refused first.
		if reached := i >= 8 && i < 136 || i >= 160 && i < auxStart || i >= sigStart; reached && tier.Reason(err) != tier.ReasonForged {
			t.Fatalf("byte %d changed: %v (reason %q), want forged", i, err, tier.Reason(err))
		}
	}
}

// Rotation: a record signed by the old key restores once a new signing key is added in front
// of it, and new records are signed by the new key; a keyring without the old key calls the
// old records forged.
func TestKeyRotation(t *testing.T) {
	old, rotated, newOnly := testKeyring(t, 1), testKeyring(t, 2, 1), testKeyring(t, 2)
	r := tiertest.Chain(testIdentity, testRoot, tiertest.SmallLayout, 1, 41)[0]
	b := signed(t, r, old)
	w := tiertest.Want(r)
	w.Keys = rotated
	if _, err := tier.DecodeVerify(b, w); err != nil {
		t.Fatalf("old record under the rotated keyring: %v", err)
	}
	nb := signed(t, r, rotated)
	got, err := tier.DecodeVerify(nb, w)
	if err != nil || got.Sig.KeyID != newOnly.SigningID() || got.Sig.KeyID == old.SigningID() {
		t.Fatalf("new record: %v, key id %08x, want the new key's %08x", err, got.Sig.KeyID, newOnly.SigningID())
	}
	w.Keys = newOnly
	if _, err := tier.DecodeVerify(b, w); tier.Reason(err) != tier.ReasonForged {
		t.Fatalf("old record once the old key is dropped: %v, want forged", err)
	}
}

func TestParseKeys(t *testing.T) {
	hex32 := strings.Repeat("ab", 32)
	b64 := "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=" // 32 bytes of 0xab
	tests := []struct {
		name, file string
		keys       int
		err        string
	}{
		{"hex", hex32 + "\n", 1, ""},
		{"base64", b64, 1, ""},
		{"several, comments, blanks, CRLF", "# signing key first\n" + hex32 + "\r\n\n  " + b64 + "  \n", 2, ""},
		{"short", strings.Repeat("ab", 15), 0, "line 1: key of 15 bytes"},
		{"junk", "# x\nnot a key!\n", 0, "line 2 is neither hex nor base64"},
		{"empty", "\n# nothing\n", 0, "no key"},
	}
	for _, tt := range tests {
		keys, err := tier.ParseKeys([]byte(tt.file))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, tier.ErrKeyFile) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || len(keys) != tt.keys {
			t.Errorf("%s: %d keys, %v; want %d", tt.name, len(keys), err, tt.keys)
		}
	}
	// The same secret twice (hex, then base64) is one key named twice: refused.
	keys, _ := tier.ParseKeys([]byte(hex32 + "\n" + b64))
	if _, err := tier.NewKeyring(keys); err == nil {
		t.Error("a keyring with one key twice was accepted")
	}
}

// LoadKeyring: files in flag order, the first key of the first file signs; errors name the
// file and the line, never a key.
func TestLoadKeyring(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	ka, kb, kc := strings.Repeat("11", 32), strings.Repeat("22", 32), strings.Repeat("33", 16)
	os.WriteFile(a, []byte(ka+"\n"+kb+"\n"), 0o600)
	os.WriteFile(b, []byte(kc+"\n"), 0o600)
	k, err := tier.LoadKeyring([]string{b, a})
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 || k.SigningID() != tier.KeyID(bytes.Repeat([]byte{0x33}, 16)) {
		t.Fatalf("%d keys, signing %08x", k.Len(), k.SigningID())
	}
	if k, err := tier.LoadKeyring(nil); k != nil || err != nil {
		t.Fatalf("no files: %v, %v", k, err)
	}
	os.WriteFile(b, []byte("secret-looking-junk\n"), 0o600)
	if _, err := tier.LoadKeyring([]string{b}); err == nil || strings.Contains(err.Error(), "junk") || !strings.Contains(err.Error(), b) {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := tier.LoadKeyring([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("missing file accepted")
	}
}

// BenchmarkVerifyMAC: restoring one block from a signed record (DecodeVerifyInto with keys:
// the CRC and copy pass, then the GMAC pass) against an unsigned one, against a plain copy
// of the same bytes, and against HMAC-SHA256 of them (the MAC GMAC was chosen over), in the
// same run. x-memcpy is the time of a restore over the time of a
// copy of the record (time.Now brackets, outside the measured loop: a report, not an
// assertion).
func BenchmarkVerifyMAC(b *testing.B) {
	k := testKeyring(b, 7)
	for _, l := range []kvcache.Layout{
		{BlockSize: 16, Layers: 32, KVHeads: 8, HeadDim: 128, DType: kvcache.F16}, // 2 MiB: an 8B model's block
		{BlockSize: 16, Layers: 2, KVHeads: 8, HeadDim: 128, DType: kvcache.F16},  // 128 KiB
	} {
		r := tiertest.Chain(testIdentity, testRoot, l, 1, 51)[0]
		plain := tiertest.Encode(r)
		sig := signed(b, r, k)
		dst := make([]byte, l.BlockBytes())
		cp := make([]byte, len(sig))
		w := tiertest.Want(r)
		wk := w
		wk.Keys = k
		memcpy := func(n int) time.Duration {
			start := time.Now()
			for range n {
				copy(cp, sig)
			}
			return time.Since(start)
		}
		name := func(s string) string { return s + "/" + strconv.Itoa(int(l.BlockBytes()>>10)) + "KiB" }
		b.Run(name("memcpy"), func(b *testing.B) {
			b.SetBytes(int64(len(sig)))
			for b.Loop() {
				copy(cp, sig)
			}
		})
		// The MAC not chosen, for the record: HMAC-SHA256 (SHA-NI) over the same bytes.
		b.Run(name("hmac-sha256"), func(b *testing.B) {
			b.SetBytes(int64(len(sig)))
			h := hmac.New(sha256.New, bytes.Repeat([]byte{7}, 32))
			var sum [32]byte
			for b.Loop() {
				h.Reset()
				h.Write(sig)
				h.Sum(sum[:0])
			}
		})
		for _, c := range []struct {
			name string
			rec  []byte
			want tier.Want
		}{{"unsigned", plain, w}, {"signed", sig, wk}} {
			b.Run(name(c.name), func(b *testing.B) {
				b.SetBytes(int64(len(c.rec)))
				b.ReportAllocs()
				var rec tier.Record
				rec.Tokens = make([]int32, 0, l.BlockSize)
				start := time.Now()
				for b.Loop() {
					if err := tier.DecodeVerifyTo(&rec, c.rec, c.want, dst); err != nil {
						b.Fatal(err)
					}
				}
				restore := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(restore)/float64(memcpy(b.N)), "x-memcpy")
			})
		}
	}
}
