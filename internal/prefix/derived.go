package prefix

import (
	"crypto/sha256"
	"encoding/binary"
)

// derivedTag starts the encoding of a derived root. It differs from rootTag at a fixed
// byte ("derived" against "root"), so no derived root can equal a Root, and a derived root
// is no block hash (chainTag) either.
const derivedTag = "stockpot/prefix/derived/v1"

// DerivedRoot returns the root of a chain that lives beside the chain rooted at parent: the
// digest of parent and a domain tag. It names the same model, tenant and salt as parent (it
// is computed from it) but shares no block with it nor with any other domain's chain: chunk
// blending (package blend) caches each chunk under DerivedRoot(root, "blend-chunk"), so a
// chunk's blocks, computed as if the chunk began the sequence, are never taken for a
// prefix's.
//
// Encoding: derivedTag || parent (32 bytes) || u32le(len(domain)) || domain; the rootBit is
// set, as in every root.
func DerivedRoot(parent Hash, domain string) Hash {
	buf := make([]byte, 0, len(derivedTag)+32+4+len(domain))
	buf = append(buf, derivedTag...)
	buf = append(buf, parent[:]...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(domain)))
	buf = append(buf, domain...)
	h := Hash(sha256.Sum256(buf))
	h[0] |= rootBit
	return h
}
