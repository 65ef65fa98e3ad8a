package tier

import (
	"encoding/binary"
	"errors"
	"fmt"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier/crc32c"
)

// FormatVersion is the record encoding's version. A decoder refuses any
// other version (ErrFormat): records written by another encoding are
// recomputed, never guessed at.
const FormatVersion = 1

// Flag bits of the record header. Unknown bits are refused.
const (
	flagStateComplete = 1 << 0
	knownFlags        = flagStateComplete
)

// Decoder limits. They bound what a hostile or torn header can make Decode
// allocate or compute before the length check refuses it; each is far above
// any real model (the largest open models have < 200 layers, 128 KV heads,
// 256-dim heads, and blocks of 16 to 256 tokens).
const (
	maxDim       = 1 << 16
	maxBlockSize = 1 << 16
	maxAux       = 1 << 16
)

// Record is one K/V block in a tier. See the package doc for the meaning of
// each field.
//
// Ownership: a Record returned by Decode aliases the decoded bytes (KV and
// every Aux entry are sub-slices of them); Tokens is a fresh slice. One that
// DecodeVerifyTo filled keeps the Tokens array it was given (see there).
type Record struct {
	Identity [32]byte    // identity.Descriptor digest: the model, before the salt
	Root     prefix.Hash // chain root: identity + tenant salt
	Hash     prefix.Hash // this block's hash
	Parent   prefix.Hash // previous block's hash, or Root for the first block
	Tokens   []int32     // exactly Layout.BlockSize ids
	Layout   kvcache.Layout
	KV       []byte // Layout.BlockBytes() bytes, kvcache block layout

	// Aux holds auxiliary state at the end of this block, opaque to the
	// tier: nil, or up to maxAux entries. The engine's hybrid models keep one,
	// the recurrent-state checkpoint of every linear layer (model.State
	// bytes; their layout is part of the identity, so a record of another
	// layout never verifies). StateComplete says the record carries all the
	// state a prefix needs to end at this block: always for models without
	// recurrent state, for hybrids only when Aux holds the checkpoint.
	Aux           [][]byte
	StateComplete bool
}

// Key returns the record's store key.
func (r *Record) Key() Key { return Key{Root: r.Root, Hash: r.Hash} }

// Encoding, little endian, offsets in bytes:
//
//	0   magic "SPKV"
//	4   u16 version, u16 flags
//	8   identity [32], root [32], hash [32], parent [32]
//	136 u8 dtype, 3 zero bytes, u32 block size, u32 layers, u32 kv heads, u32 head dim
//	156 u32 n aux (0 to maxAux)
//	160 tokens: block size x i32
//	    KV: BlockBytes bytes
//	    aux: n aux x (u32 len, len bytes)
//	    u32 CRC-32C (Castagnoli) of every byte before it
const (
	magic      = "SPKV"
	headerSize = 160
	trailer    = 4
)

// ErrFormat is wrapped by every Decode error about the shape of the bytes.
var ErrFormat = errors.New("tier: malformed record")

// EncodedSize returns len(r.Encode()).
func (r *Record) EncodedSize() int {
	n := headerSize + 4*len(r.Tokens) + len(r.KV) + trailer
	for _, a := range r.Aux {
		n += 4 + len(a)
	}
	return n
}

// EncodedSizeOf is the EncodedSize of a record of layout l without Aux (each Aux entry of n
// bytes adds 4+n).
func EncodedSizeOf(l kvcache.Layout) int64 {
	return int64(headerSize+4*l.BlockSize+trailer) + l.BlockBytes()
}

// Encode returns the record's encoding in a new slice. It validates the
// record first: a record that Decode would refuse is a programmer bug and
// gets an error here rather than a write that is never readable.
func (r *Record) Encode() ([]byte, error) {
	return r.AppendEncode(make([]byte, 0, r.EncodedSize()))
}

// AppendEncode appends the record's encoding to dst.
func (r *Record) AppendEncode(dst []byte) ([]byte, error) {
	if err := r.validate(); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, magic...)
	var flags uint16
	if r.StateComplete {
		flags |= flagStateComplete
	}
	dst = binary.LittleEndian.AppendUint16(dst, FormatVersion)
	dst = binary.LittleEndian.AppendUint16(dst, flags)
	dst = append(dst, r.Identity[:]...)
	dst = append(dst, r.Root[:]...)
	dst = append(dst, r.Hash[:]...)
	dst = append(dst, r.Parent[:]...)
	dst = append(dst, byte(r.Layout.DType), 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Layout.BlockSize))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Layout.Layers))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Layout.KVHeads))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(r.Layout.HeadDim))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Aux)))
	for _, t := range r.Tokens {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(t))
	}
	dst = append(dst, r.KV...)
	for _, a := range r.Aux {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(a)))
		dst = append(dst, a...)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32c.Checksum(dst[start:])), nil
}

func (r *Record) validate() error {
	l := r.Layout
	if err := l.Validate(); err != nil {
		return fmt.Errorf("tier: record layout: %w", err)
	}
	if l.BlockSize > maxBlockSize || l.Layers > maxDim || l.KVHeads > maxDim || l.HeadDim > maxDim {
		return fmt.Errorf("%w: layout %v over the decoder's limits", ErrFormat, l)
	}
	if len(r.Tokens) != l.BlockSize {
		return fmt.Errorf("%w: %d tokens, block size %d", ErrFormat, len(r.Tokens), l.BlockSize)
	}
	if int64(len(r.KV)) != l.BlockBytes() {
		return fmt.Errorf("%w: %d K/V bytes, layout needs %d", ErrFormat, len(r.KV), l.BlockBytes())
	}
	if len(r.Aux) > maxAux {
		return fmt.Errorf("%w: %d aux entries, at most %d", ErrFormat, len(r.Aux), maxAux)
	}
	return nil
}

// Decode parses an encoded record. It checks everything it can without
// knowing what the caller expects: magic, version, flags, layout, lengths
// (the input must be exactly one record), and the checksum. A checksum
// mismatch wraps ErrChecksum; anything else wraps ErrFormat. The returned
// record aliases b (see Record).
func Decode(b []byte) (*Record, error) {
	r := new(Record)
	if err := decodeTo(r, b); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeTo is Decode into r (see decodeSummed for what of r it reuses).
func decodeTo(r *Record, b []byte) error {
	if len(b) < headerSize+trailer {
		return fmt.Errorf("%w: %d bytes, shorter than a header", ErrFormat, len(b))
	}
	if string(b[:4]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrFormat, b[:4])
	}
	// The checksum comes first: a torn or flipped record is "checksum",
	// whatever field the damage happens to hit.
	if err := checkSum(crc32c.Checksum(b[:len(b)-trailer]), b); err != nil {
		return err
	}
	return decodeSummed(r, b)
}

// checkSum compares got, the CRC-32C of b's body, with b's trailer.
func checkSum(got uint32, b []byte) error {
	if want := binary.LittleEndian.Uint32(b[len(b)-trailer:]); got != want {
		return fmt.Errorf("%w: crc32c %08x, record says %08x", ErrChecksum, got, want)
	}
	return nil
}

// decodeSummed is Decode after the checksum matched, into r: every field is overwritten, and
// r's Tokens and Aux arrays are reused where they have room (a new Record has none: Decode's
// Tokens are fresh). On error r holds garbage.
//
// REQUIRES: len(b) >= headerSize+trailer, magic checked, checksum checked.
func decodeSummed(r *Record, b []byte) error {
	body := b[:len(b)-trailer]
	if v := binary.LittleEndian.Uint16(b[4:]); v != FormatVersion {
		return fmt.Errorf("%w: version %d, this build reads %d", ErrFormat, v, FormatVersion)
	}
	flags := binary.LittleEndian.Uint16(b[6:])
	if flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrFormat, flags)
	}
	*r = Record{Tokens: r.Tokens, Aux: r.Aux, StateComplete: flags&flagStateComplete != 0}
	copy(r.Identity[:], b[8:40])
	copy(r.Root[:], b[40:72])
	copy(r.Hash[:], b[72:104])
	copy(r.Parent[:], b[104:136])
	if b[137]|b[138]|b[139] != 0 {
		return fmt.Errorf("%w: nonzero padding", ErrFormat)
	}
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	bs, layers, heads, dim, naux := u32(140), u32(144), u32(148), u32(152), u32(156)
	if bs > maxBlockSize || layers > maxDim || heads > maxDim || dim > maxDim {
		return fmt.Errorf("%w: shape %dx%dx%dx%d over the decoder's limits", ErrFormat, bs, layers, heads, dim)
	}
	r.Layout = kvcache.Layout{BlockSize: int(bs), Layers: int(layers), KVHeads: int(heads), HeadDim: int(dim), DType: kvcache.DType(b[136])}
	if err := r.Layout.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if naux > maxAux {
		return fmt.Errorf("%w: %d aux entries, at most %d", ErrFormat, naux, maxAux)
	}
	// Lengths in int64, checked against what is left before the last
	// multiply: each factor is < 2^17, so row < 2^35 and perLayer < 2^52, and
	// perLayer*layers is formed only once perLayer <= rest (< 2^63 / 2^17).
	rest := int64(len(body) - headerSize)
	need := int64(bs) * 4
	if need > rest {
		return fmt.Errorf("%w: %d tokens need %d bytes, %d left", ErrFormat, bs, need, rest)
	}
	// Bytes per 32 elements (128, 64, or 34 for q8_0, whose head dim is a multiple of 32).
	row := int64(heads) * int64(dim) * int64(r.Layout.DType.RowBytes(kvcache.Q8Block)) / kvcache.Q8Block // < 2^35
	perLayer := row * 2 * int64(bs)                                                                      // < 2^52
	if perLayer > rest || perLayer*int64(layers) > rest-need {
		return fmt.Errorf("%w: layout %v needs more than the %d bytes left", ErrFormat, r.Layout, rest-need)
	}
	off := headerSize
	if cap(r.Tokens) >= int(bs) {
		r.Tokens = r.Tokens[:bs]
	} else {
		r.Tokens = make([]int32, bs)
	}
	for i := range r.Tokens {
		r.Tokens[i] = int32(binary.LittleEndian.Uint32(b[off:]))
		off += 4
	}
	kvBytes := int(r.Layout.BlockBytes())
	r.KV = body[off : off+kvBytes : off+kvBytes]
	off += kvBytes
	if naux == 0 {
		r.Aux = nil
	} else {
		if int64(naux)*4 > int64(len(body)-off) { // each entry has at least its length
			return fmt.Errorf("%w: %d aux entries, %d bytes left", ErrFormat, naux, len(body)-off)
		}
		if cap(r.Aux) >= int(naux) {
			r.Aux = r.Aux[:naux]
		} else {
			r.Aux = make([][]byte, naux)
		}
		for i := range r.Aux {
			if len(body)-off < 4 {
				return fmt.Errorf("%w: aux %d: length cut off", ErrFormat, i)
			}
			n := int64(binary.LittleEndian.Uint32(body[off:]))
			off += 4
			if n > int64(len(body)-off) {
				return fmt.Errorf("%w: aux %d: %d bytes, %d left", ErrFormat, i, n, len(body)-off)
			}
			r.Aux[i] = body[off : off+int(n) : off+int(n)]
			off += int(n)
		}
	}
	if off != len(body) {
		return fmt.Errorf("%w: %d trailing bytes", ErrFormat, len(body)-off)
	}
	return nil
}
