package prefix

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Hash names a block by everything that determines its K/V: the cache
// identity and salt (through the root) and every token from the start of the
// sequence to the end of the block (through the chain).
type Hash [32]byte

// String returns the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Short returns the first 8 hex digits, for logs and test output.
func (h Hash) Short() string { return hex.EncodeToString(h[:4]) }

// IsZero reports whether h is the zero hash (never a real root or block).
func (h Hash) IsZero() bool { return h == Hash{} }

// rootBit is set in byte 0 of every root and clear in every block hash, so a
// hash says by itself whether it is a chain's root. The Cache needs that to
// tell a sequence's first block (parent = root, never indexed) from a block
// whose parent is missing from the index (refused, or it would be cached
// under no parent). It costs one bit: 255 bits of SHA-256 remain.
const rootBit = 0x80

// IsRoot reports whether h was made by Root (rather than Chain).
func (h Hash) IsRoot() bool { return h[0]&rootBit != 0 }

// Domain tags. The root's encoding starts with rootTag and a block's with
// chainTag, so no root can equal a block hash by construction of the input.
// "v1" is bumped whenever the encoding changes, so caches and routers running
// different encodings share nothing instead of sharing wrong K/V.
const (
	rootTag  = "stockpot/prefix/root/v1"
	chainTag = 'B'
)

// Root returns the root of a hash chain: the digest of the cache identity
// (model fingerprint, see package identity) and the tenant salt. Requests with
// different identities or salts share no block.
//
// Encoding: rootTag || u32le(len(identity)) || identity || u32le(len(salt)) || salt.
// The lengths make the encoding injective ("ab"+"c" differs from "a"+"bc").
func Root(identity []byte, salt string) Hash {
	buf := make([]byte, 0, len(rootTag)+8+len(identity)+len(salt))
	buf = append(buf, rootTag...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(identity)))
	buf = append(buf, identity...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(salt)))
	buf = append(buf, salt...)
	h := Hash(sha256.Sum256(buf))
	h[0] |= rootBit
	return h
}

// Chain returns the hash of the block holding tokens whose predecessor (the
// previous block, or the root for the first block) hashes to parent. extra is
// anything else that changes the block's K/V (for example a digest of image
// inputs); nil for plain text.
//
// Encoding: chainTag || parent (32 bytes) || u32le(len(tokens)) ||
// u32le(token) for each token || u32le(len(extra)) || extra.
//
// Why fixed-width token ids: every id takes exactly four bytes, so the
// encoding of a token list is injective without separators (a varint or
// decimal text would need them, and is easy to get subtly ambiguous); it is
// also the same on every machine, so a router computes the very hashes a
// replica publishes. Why SHA-256: these hashes are shared between tenants'
// requests and across machines, so a collision must be infeasible even for a
// client choosing its tokens adversarially; a 64-bit non-cryptographic hash
// would not give that. The cache still confirms tokens on every hit.
func Chain(parent Hash, tokens []int32, extra []byte) Hash {
	var stack [1 + 32 + 4 + 4*64 + 4]byte
	return chainInto(stack[:0], parent, tokens, extra)
}

// chainInto computes Chain using buf's storage when it is big enough.
func chainInto(buf []byte, parent Hash, tokens []int32, extra []byte) Hash {
	buf = append(buf[:0], chainTag)
	buf = append(buf, parent[:]...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(tokens)))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(extra)))
	buf = append(buf, extra...)
	h := Hash(sha256.Sum256(buf))
	h[0] &^= rootBit
	return h
}

// BlockHashes returns the chain hashes of the full blocks of tokens:
// len(tokens)/blockSize hashes, the i-th covering tokens [0, (i+1)*blockSize).
// A trailing partial block gets no hash: its K/V is not final (the next token
// appends to it), so it is never shared.
func BlockHashes(root Hash, tokens []int32, blockSize int) []Hash {
	return AppendBlockHashes(nil, root, tokens, blockSize)
}

// AppendBlockHashes appends the hashes BlockHashes returns to dst.
func AppendBlockHashes(dst []Hash, root Hash, tokens []int32, blockSize int) []Hash {
	if blockSize <= 0 {
		panic("prefix: block size must be > 0")
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return dst
	}
	dst = growHashes(dst, n)
	buf := make([]byte, 0, 1+32+4+4*blockSize+4)
	parent := root
	for i := range n {
		parent = chainInto(buf, parent, tokens[i*blockSize:(i+1)*blockSize], nil)
		dst = append(dst, parent)
	}
	return dst
}

func growHashes(dst []Hash, n int) []Hash {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	out := make([]Hash, len(dst), len(dst)+n)
	copy(out, dst)
	return out
}
