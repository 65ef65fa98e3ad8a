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
// recomputed, never guessed at. Signing (flagSigned) did not change it: an
// unsigned record is byte for byte what version 1 always was, and a build
// from before signing refuses a signed one by its unknown flag.
const FormatVersion = 1

// Flag bits of the record header. Unknown bits are refused.
const (
	flagStateComplete = 1 << 0
	flagSigned        = 1 << 1 // a MAC trailer (Signature) precedes the CRC
	knownFlags        = flagStateComplete | flagSigned
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

	// Signed says the record carries a MAC trailer, Sig. Decode sets both from the bytes
	// and checks no MAC (the DecodeVerify functions do, given Want.Keys); Encode writes
	// them back as they are, so a decoded record re-encodes to its bytes; EncodeSigned
	// ignores them and signs afresh.
	Signed bool
	Sig    Signature
}

// Signature is a signed record's MAC trailer: the id of the key that signed it (KeyID), the
// GMAC nonce, and the tag over every byte of the record before the tag.
type Signature struct {
	KeyID uint32
	Nonce [nonceSize]byte
	Tag   [tagSize]byte
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
//	    signed (flag bit 1) only: u32 key id, nonce [12], tag [16] (Signature)
//	    u32 CRC-32C (Castagnoli) of every byte before it
//
// The CRC stays last and covers the signature, so a signed record is still "bytes whose last
// four are their CRC-32C" (the disk tier checks its files by that residue), and a torn or
// flipped record is checksum damage, not a forgery.
const (
	magic      = "SPKV"
	headerSize = 160
	trailer    = 4
	nonceSize  = 12
	tagSize    = 16
	sigSize    = 4 + nonceSize + tagSize
)

// ErrFormat is wrapped by every Decode error about the shape of the bytes.
var ErrFormat = errors.New("tier: malformed record")

// EncodedSize returns len(r.Encode()).
func (r *Record) EncodedSize() int {
	n := r.encodedSize()
	if r.Signed {
		n += sigSize
	}
	return n
}

// encodedSize is EncodedSize of the unsigned encoding.
func (r *Record) encodedSize() int {
	n := headerSize + 4*len(r.Tokens) + len(r.KV) + trailer
	for _, a := range r.Aux {
		n += 4 + len(a)
	}
	return n
}

// EncodedSizeOf is the EncodedSize of an unsigned record of layout l without Aux (each Aux
// entry of n bytes adds 4+n, a signature SignatureSize).
func EncodedSizeOf(l kvcache.Layout) int64 {
	return int64(headerSize+4*l.BlockSize+trailer) + l.BlockBytes()
}

// Encode returns the record's encoding in a new slice. It validates the
// record first: a record that Decode would refuse is a programmer bug and
// gets an error here rather than a write that is never readable.
func (r *Record) Encode() ([]byte, error) {
	return r.AppendEncode(make([]byte, 0, r.EncodedSize()))
}

// SignatureSize is what signing adds to a record's encoding.
const SignatureSize = sigSize

// AppendEncode appends the record's encoding to dst: signed with r.Sig as it is when r.Signed
// (a decoded record's own), unsigned otherwise. Writers sign with AppendSigned.
func (r *Record) AppendEncode(dst []byte) ([]byte, error) {
	if err := r.validate(); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = r.appendBody(dst, r.Signed)
	if r.Signed {
		dst = binary.LittleEndian.AppendUint32(dst, r.Sig.KeyID)
		dst = append(dst, r.Sig.Nonce[:]...)
		dst = append(dst, r.Sig.Tag[:]...)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32c.Checksum(dst[start:])), nil
}

// EncodeSigned returns the record's encoding signed by k's signing key, in a new slice; with
// k nil, the unsigned encoding. r.Signed and r.Sig are ignored (and left as they are).
func (r *Record) EncodeSigned(k *Keyring) ([]byte, error) {
	n := r.encodedSize()
	if k != nil {
		n += sigSize
	}
	return r.AppendSigned(make([]byte, 0, n), k)
}

// AppendSigned appends the record's encoding signed by k's signing key (a fresh nonce, the
// GMAC tag of every byte before the tag) to dst; with k nil, the unsigned encoding.
func (r *Record) AppendSigned(dst []byte, k *Keyring) ([]byte, error) {
	if k == nil {
		u := *r
		u.Signed = false
		return u.AppendEncode(dst)
	}
	if err := r.validate(); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = r.appendBody(dst, true)
	id, nonce := k.newNonce()
	dst = binary.LittleEndian.AppendUint32(dst, id)
	dst = append(dst, nonce[:]...)
	var tag [tagSize]byte // GCM's Seal must not write over its additional data: the tag goes here first
	dst = append(dst, k.seal(tag[:0], nonce[:], dst[start:])...)
	return binary.LittleEndian.AppendUint32(dst, crc32c.Checksum(dst[start:])), nil
}

// appendBody appends the header, tokens, K/V and aux: everything before the signature.
func (r *Record) appendBody(dst []byte, signed bool) []byte {
	dst = append(dst, magic...)
	var flags uint16
	if r.StateComplete {
		flags |= flagStateComplete
	}
	if signed {
		flags |= flagSigned
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
	return dst
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

// checkMAC checks the signature of r, decoded from b, against keys: nothing to check with no
// keys; with keys, an unsigned record, one signed by a key keys does not hold, and one whose
// tag does not match are ErrForged.
//
// REQUIRES: decodeSummed(r, b) succeeded.
func checkMAC(r *Record, b []byte, keys *Keyring) error {
	if keys == nil {
		return nil
	}
	if !r.Signed {
		return fmt.Errorf("%w: unsigned record, and a key is configured", ErrForged)
	}
	msg := b[:len(b)-trailer-tagSize] // everything before the tag, the key id and nonce included
	return keys.check(r.Sig.KeyID, r.Sig.Nonce[:], r.Sig.Tag[:], msg)
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
	*r = Record{Tokens: r.Tokens, Aux: r.Aux, StateComplete: flags&flagStateComplete != 0, Signed: flags&flagSigned != 0}
	if r.Signed {
		if len(body) < headerSize+sigSize {
			return fmt.Errorf("%w: signed, %d bytes, shorter than a header and a signature", ErrFormat, len(b))
		}
		sig := body[len(body)-sigSize:]
		body = body[:len(body)-sigSize]
		r.Sig.KeyID = binary.LittleEndian.Uint32(sig)
		copy(r.Sig.Nonce[:], sig[4:])
		copy(r.Sig.Tag[:], sig[4+nonceSize:])
	}
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
