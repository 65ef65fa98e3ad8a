package tier

import (
	"errors"
	"fmt"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier/crc32c"
)

// Verification failures. The engine counts discarded blocks by Reason(err).
var (
	ErrChecksum        = errors.New("tier: checksum mismatch")
	ErrIdentity        = errors.New("tier: record of another identity or prefix")
	ErrTokens          = errors.New("tier: record tokens differ")
	ErrShape           = errors.New("tier: record shape differs")
	ErrIncompleteState = errors.New("tier: record's auxiliary state incomplete")
	// ErrForged: a key is configured (Want.Keys) and the record's MAC does not prove that
	// a holder of one of its keys wrote it (unsigned, an unknown key, a wrong tag).
	ErrForged = errors.New("tier: record not authenticated")
)

// Discard reasons, the label values of stockpot_kv_blocks_discarded_total.
const (
	ReasonChecksum            = "checksum"
	ReasonIdentity            = "identity"
	ReasonIncompleteState     = "incomplete_state"
	ReasonSlowerThanRecompute = "slower_than_recompute"
	ReasonForged              = "forged"
)

// Reason maps a Decode or Verify error to its discard reason. Malformed bytes
// count as checksum (they are damaged data); tokens and shape mismatches count
// as identity (the record is not the block the caller asked for); a MAC that
// fails counts as forged.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrForged):
		return ReasonForged
	case errors.Is(err, ErrIncompleteState):
		return ReasonIncompleteState
	case errors.Is(err, ErrIdentity), errors.Is(err, ErrTokens), errors.Is(err, ErrShape):
		return ReasonIdentity
	default:
		return ReasonChecksum
	}
}

// Want is what a reader expects of a record it fetched.
type Want struct {
	Identity  [32]byte // identity digest; zero skips the check (Root implies it)
	Root      prefix.Hash
	Hash      prefix.Hash
	Parent    prefix.Hash // zero skips the check
	Tokens    []int32
	Layout    kvcache.Layout
	NeedState bool // the model keeps recurrent state: the record must be StateComplete
	// Keys, when set, authenticate the record (DecodeVerify*, not Verify, which has no
	// bytes to check): it must be signed by one of them, or it is ErrForged. Nil checks no
	// MAC: no key is configured, or the bytes never left this process (the host tier).
	Keys *Keyring
}

// Verify checks a decoded record against want. Checksum and format were
// checked by Decode; DecodeVerify does both, and the MAC (want.Keys) before
// Verify's checks, so a record that is not authentic is forged whatever it
// claims to be.
func Verify(r *Record, want Want) error {
	if r.Root != want.Root || r.Hash != want.Hash {
		return fmt.Errorf("%w: record %s/%s, want %s/%s", ErrIdentity, r.Root.Short(), r.Hash.Short(), want.Root.Short(), want.Hash.Short())
	}
	if want.Identity != ([32]byte{}) && r.Identity != want.Identity {
		// Copies, so that slicing them does not move want to the heap on every call.
		got, exp := r.Identity, want.Identity
		return fmt.Errorf("%w: identity digest %x, want %x", ErrIdentity, got[:4], exp[:4])
	}
	if !want.Parent.IsZero() && r.Parent != want.Parent {
		return fmt.Errorf("%w: parent %s, want %s", ErrIdentity, r.Parent.Short(), want.Parent.Short())
	}
	if r.Layout != want.Layout {
		return fmt.Errorf("%w: %v, want %v", ErrShape, r.Layout, want.Layout)
	}
	if len(r.Tokens) != len(want.Tokens) {
		return fmt.Errorf("%w: %d tokens, want %d", ErrTokens, len(r.Tokens), len(want.Tokens))
	}
	for i, t := range r.Tokens {
		if t != want.Tokens[i] {
			return fmt.Errorf("%w: token %d is %d, want %d", ErrTokens, i, t, want.Tokens[i])
		}
	}
	if want.NeedState && !r.StateComplete {
		return fmt.Errorf("%w: block %s", ErrIncompleteState, r.Hash.Short())
	}
	return nil
}

// DecodeVerify decodes b and verifies it against want.
func DecodeVerify(b []byte, want Want) (*Record, error) {
	r := new(Record)
	if err := decodeVerify(r, b, want); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeVerify(r *Record, b []byte, want Want) error {
	if err := decodeTo(r, b); err != nil {
		return err
	}
	if err := checkMAC(r, b, want.Keys); err != nil {
		return err
	}
	return Verify(r, want)
}

// DecodeVerifyInto is DecodeVerify that also copies the record's K/V into dst, in the same
// pass over b as the checksum (crc32c.UpdateCopy): the record's bytes cross the memory bus
// once instead of twice. On success the returned Record's KV is dst (the rest aliases b, as
// with Decode). On any error dst holds some or all of b's K/V bytes, unverified: the caller
// must treat it as garbage. The errors, and their Reason, are those DecodeVerify returns for
// the same b and want.
//
// REQUIRES: len(dst) == want.Layout.BlockBytes() (panics otherwise: a caller bug).
func DecodeVerifyInto(b []byte, want Want, dst []byte) (*Record, error) {
	checkInto(want, dst)
	r := new(Record)
	if err := decodeVerifyInto(r, b, want, dst); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeVerifyTo is DecodeVerifyInto (dst set) or DecodeVerify (dst nil) into r, a Record
// the caller owns, instead of a new one: it allocates nothing, so a reader of many blocks
// can give each a Record and Tokens cut from arrays of its own (one allocation each for a
// whole fetch, not two a block). Every field of r is overwritten; r.Tokens' array is reused
// when it has room for the block's tokens (its ids are then the record's), and so is r.Aux's.
// On error r holds garbage, and so does dst. The errors are those of DecodeVerify.
//
// REQUIRES: dst nil or len(dst) == want.Layout.BlockBytes() (panics otherwise).
func DecodeVerifyTo(r *Record, b []byte, want Want, dst []byte) error {
	if dst == nil {
		return decodeVerify(r, b, want)
	}
	checkInto(want, dst)
	return decodeVerifyInto(r, b, want, dst)
}

// checkInto panics unless dst is one block of want's layout.
func checkInto(want Want, dst []byte) {
	if l := want.Layout; l.Validate() != nil || int64(len(dst)) != l.BlockBytes() {
		panic(fmt.Sprintf("tier: DecodeVerifyInto: %d destination bytes for layout %v", len(dst), l))
	}
}

// decodeVerifyInto is DecodeVerifyInto into r.
//
// REQUIRES: checkInto(want, dst) passed.
func decodeVerifyInto(r *Record, b []byte, want Want, dst []byte) error {
	l := want.Layout
	kvOff := headerSize + 4*l.BlockSize
	kvEnd := kvOff + len(dst)
	if len(b) < kvEnd+trailer || string(b[:4]) != magic {
		// Not a record of this shape: DecodeVerify says exactly why.
		if err := decodeVerify(r, b, want); err != nil {
			return err
		}
		copy(dst, r.KV)
		r.KV = dst
		return nil
	}
	sum := crc32c.Update(0, b[:kvOff])
	sum = crc32c.UpdateCopy(sum, dst, b[kvOff:kvEnd])
	sum = crc32c.Update(sum, b[kvEnd:len(b)-trailer])
	if err := checkSum(sum, b); err != nil {
		return err
	}
	if err := decodeSummed(r, b); err != nil {
		return err
	}
	if err := checkMAC(r, b, want.Keys); err != nil {
		return err
	}
	// Verify checks r.Layout == want.Layout, so the K/V really was at [kvOff, kvEnd).
	if err := Verify(r, want); err != nil {
		return err
	}
	r.KV = dst
	return nil
}
