package tier

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Keyring holds the keys that authenticate records (see the package doc, "Authentication"):
// the first signs what this process writes, every one verifies. Immutable once made; safe for
// concurrent use. A nil *Keyring signs nothing and checks nothing (no key configured).
type Keyring struct {
	keys []ringKey // keys[0] signs; ids distinct
}

// ringKey is one key of a Keyring.
type ringKey struct {
	id   uint32      // KeyID of the secret: written into each record it signs
	gmac cipher.AEAD // AES-256-GCM under the key derived from the secret; used with no plaintext
}

// MinKeyBytes is the shortest secret a Keyring takes: 128 bits, the strength of GMAC's tag.
const MinKeyBytes = 16

// maxKeyFileBytes bounds what ReadKeyFile reads: a key file holds a few lines.
const maxKeyFileBytes = 64 << 10

// ErrKeyFile is wrapped by every error about a key file's contents.
var ErrKeyFile = errors.New("tier: bad key file")

// KeyID is the identifier a secret's records carry: 4 bytes derived from the secret (HKDF),
// so the same secret has the same id in every process and its position in a key file does not
// matter. It says which key to check a record with; it reveals nothing usable about the key.
func KeyID(secret []byte) uint32 {
	b, err := hkdf.Key(sha256.New, secret, nil, "stockpot tier record key id", 4)
	if err != nil {
		panic(err) // 4 bytes of SHA-256 HKDF cannot fail
	}
	return binary.LittleEndian.Uint32(b)
}

// NewKeyring returns a Keyring over secrets (at least MinKeyBytes each; the first signs). No
// secrets is a nil Keyring, nil error. Two secrets with one KeyID (the same secret twice) are
// refused.
func NewKeyring(secrets [][]byte) (*Keyring, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	k := &Keyring{keys: make([]ringKey, 0, len(secrets))}
	for i, s := range secrets {
		if len(s) < MinKeyBytes {
			return nil, fmt.Errorf("%w: key %d has %d bytes, at least %d needed", ErrKeyFile, i+1, len(s), MinKeyBytes)
		}
		id := KeyID(s)
		for _, o := range k.keys {
			if o.id == id {
				return nil, fmt.Errorf("%w: key %d repeats an earlier key (id %08x)", ErrKeyFile, i+1, id)
			}
		}
		// The AES key is derived, not the secret itself: a secret of any length >= 16 bytes
		// works, and the key that MACs records is used for nothing else.
		ak, err := hkdf.Key(sha256.New, s, nil, "stockpot tier record gmac", 32)
		if err != nil {
			return nil, err
		}
		block, err := aes.NewCipher(ak)
		if err != nil {
			return nil, err
		}
		g, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		k.keys = append(k.keys, ringKey{id: id, gmac: g})
	}
	return k, nil
}

// ParseKeys reads the secrets of a key file: one key a line, hex or standard base64 (as
// `openssl rand -hex 32` or `openssl rand -base64 32` print them); blank lines and lines that
// start with # are skipped. A line that is neither, or a file with no key, is an error that
// names the line (never its contents).
func ParseKeys(b []byte) ([][]byte, error) {
	var out [][]byte
	for n, line := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		key, err := hex.DecodeString(s)
		if err != nil {
			key, err = base64.StdEncoding.DecodeString(s)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: line %d is neither hex nor base64", ErrKeyFile, n+1)
		}
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("%w: line %d: key of %d bytes, at least %d needed", ErrKeyFile, n+1, len(key), MinKeyBytes)
		}
		out = append(out, key)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no key in it", ErrKeyFile)
	}
	return out, nil
}

// LoadKeyring reads the key files at paths (--tier-key-file, in flag order) into one Keyring:
// the first key of the first file signs. No paths is a nil Keyring.
func LoadKeyring(paths []string) (*Keyring, error) {
	var secrets [][]byte
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("tier: key file %s: %w", p, err)
		}
		if len(b) > maxKeyFileBytes {
			return nil, fmt.Errorf("%w %s: over %d bytes", ErrKeyFile, p, maxKeyFileBytes)
		}
		keys, err := ParseKeys(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		secrets = append(secrets, keys...)
	}
	return NewKeyring(secrets)
}

// Len returns how many keys k holds (0 for nil).
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// SigningID returns the KeyID of the key that signs (0 for nil).
func (k *Keyring) SigningID() uint32 {
	if k == nil {
		return 0
	}
	return k.keys[0].id
}

// newNonce returns the signing key's id and a fresh random nonce for one record. Random
// 96-bit nonces: GMAC must never see one nonce twice under one key, and 2^32 records under a
// key (far more than a cache writes between rotations) collide with odds under 2^-32.
//
// REQUIRES: k != nil.
func (k *Keyring) newNonce() (id uint32, nonce [nonceSize]byte) {
	rand.Read(nonce[:]) // never fails (crypto/rand)
	return k.keys[0].id, nonce
}

// seal appends the tag of msg (under the signing key, with nonce) to dst.
func (k *Keyring) seal(dst []byte, nonce []byte, msg []byte) []byte {
	return k.keys[0].gmac.Seal(dst, nonce, nil, msg)
}

// check verifies tag over msg with the key of id. It fails (ErrForged) for an id no key of k
// has and for a tag that does not match.
func (k *Keyring) check(id uint32, nonce, tag, msg []byte) error {
	for i := range k.keys {
		if k.keys[i].id != id {
			continue
		}
		if _, err := k.keys[i].gmac.Open(nil, nonce, tag, msg); err != nil {
			return fmt.Errorf("%w: MAC mismatch under key %08x", ErrForged, id)
		}
		return nil
	}
	return fmt.Errorf("%w: signed by key %08x, which no configured key is", ErrForged, id)
}
