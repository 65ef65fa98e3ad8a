package disk

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// crcCombine agrees with crc32.Checksum over the concatenation, for every split of random
// messages of many lengths.
func TestCRCCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 3, 4, 7, 8, 63, 112, 1000, 4096, 65537} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		want := crc32.Checksum(msg, castagnoli)
		for _, cut := range []int{0, n / 3, n / 2, n} {
			a, b := msg[:cut], msg[cut:]
			if got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), len(b)); got != want {
				t.Fatalf("len %d cut %d: combine %08x, want %08x", n, cut, got, want)
			}
		}
	}
}

// A message followed by its own little-endian CRC-32C has CRC recordResidue, whatever the
// message: what GetChecked relies on for a value the reader verified.
func TestRecordResidue(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 5, 160, 4099} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		rec := binary.LittleEndian.AppendUint32(msg, crc32.Checksum(msg, castagnoli))
		if got := crc32.Checksum(rec, castagnoli); got != recordResidue {
			t.Fatalf("len %d: CRC of message and its CRC is %08x, want residue %08x", n, got, recordResidue)
		}
	}
}

func FuzzCRCCombine(f *testing.F) {
	f.Add([]byte("header"), []byte("value bytes"))
	f.Add([]byte{}, []byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		want := crc32.Checksum(append(append([]byte{}, a...), b...), castagnoli)
		if got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), len(b)); got != want {
			t.Fatalf("combine %08x, want %08x (len a %d, b %d)", got, want, len(a), len(b))
		}
	})
}
