package tenant

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header carries a router's signed statement of a request's tenant to a replica.
const Header = "X-Stockpot-Tenant"

// MaxSkew is how far a signed identity's issue time may be from the replica's clock, either
// way: the replay window. Router and replicas run NTP; 30 s covers a slow proxy and a skewed
// clock while keeping a captured header useless soon after.
const MaxSkew = 30 * time.Second

// Claims is what a signed identity header says.
type Claims struct {
	Name        string
	Namespace   string
	PublicReads bool
	IssuedAt    time.Time // millisecond precision
	Nonce       string    // 32 hex digits, fresh per header
}

// Tenant returns the tenant the claims describe (without keys or quotas: a replica that has
// its own tenants file looks the name up instead).
func (c Claims) Tenant() *Tenant {
	return &Tenant{Name: c.Name, Namespace: c.Namespace, PublicReads: c.PublicReads, Index: -1}
}

// Errors of Verify.
var (
	ErrHeaderMalformed = errors.New("tenant: malformed identity header")
	ErrHeaderSignature = errors.New("tenant: identity header signature does not verify")
	ErrHeaderStale     = errors.New("tenant: identity header outside the replay window")
	ErrHeaderReplayed  = errors.New("tenant: identity header replayed")
)

const headerVersion = "v1"

// Sign returns the header value stating t's identity at now, signed with key (the shared
// --backend-key). Each call draws a fresh nonce.
func Sign(key string, t *Tenant, now time.Time) string {
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	return signWith(key, Claims{Name: t.Name, Namespace: t.Namespace, PublicReads: t.PublicReads,
		IssuedAt: now.Truncate(time.Millisecond), Nonce: hex.EncodeToString(nb[:])})
}

func signWith(key string, c Claims) string {
	pub := "0"
	if c.PublicReads {
		pub = "1"
	}
	fields := fmt.Sprintf("%s name=%s ns=%s pub=%s iat=%d nonce=%s", headerVersion, c.Name, c.Namespace, pub, c.IssuedAt.UnixMilli(), c.Nonce)
	return fields + " sig=" + mac(key, fields)
}

// mac is the hex HMAC-SHA256 of the header's fields (everything before " sig="), under a
// label so the key signs nothing else by accident.
func mac(key, fields string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("stockpot/tenant-header\n"))
	m.Write([]byte(fields))
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a header value signed with key at now: the signature (constant time), the
// issue time within MaxSkew, and, when guard is not nil, that its nonce was not seen before.
func Verify(key, value string, now time.Time, guard *ReplayGuard) (Claims, error) {
	var c Claims
	if key == "" {
		return c, ErrHeaderSignature
	}
	fields, sig, ok := strings.Cut(value, " sig=")
	if !ok {
		return c, ErrHeaderMalformed
	}
	want := mac(key, fields)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return c, ErrHeaderSignature
	}
	parts := strings.Split(fields, " ")
	if len(parts) != 6 || parts[0] != headerVersion {
		return c, ErrHeaderMalformed
	}
	vals := map[string]string{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return c, ErrHeaderMalformed
		}
		vals[k] = v
	}
	c.Name, c.Namespace, c.Nonce = vals["name"], vals["ns"], vals["nonce"]
	if !validIdentifier(c.Name) || !validIdentifier(c.Namespace) || len(c.Nonce) != 32 {
		return c, ErrHeaderMalformed
	}
	switch vals["pub"] {
	case "1":
		c.PublicReads = true
	case "0":
	default:
		return c, ErrHeaderMalformed
	}
	ms, err := strconv.ParseInt(vals["iat"], 10, 64)
	if err != nil {
		return c, ErrHeaderMalformed
	}
	c.IssuedAt = time.UnixMilli(ms)
	if d := now.Sub(c.IssuedAt); d > MaxSkew || d < -MaxSkew {
		return c, fmt.Errorf("%w (issued %v from now)", ErrHeaderStale, -d)
	}
	if guard != nil && !guard.Fresh(c.Nonce, c.IssuedAt, now) {
		return c, ErrHeaderReplayed
	}
	return c, nil
}

func validIdentifier(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ReplayGuard remembers the nonces of verified headers for as long as they could verify
// (MaxSkew after their issue time), so each header is accepted once. Safe for concurrent use.
type ReplayGuard struct {
	mu struct {
		sync.Mutex
		seen map[string]time.Time // nonce -> when it can be forgotten; protected by mu
	}
	// Max bounds the nonces held; past it new headers are refused (fail closed) until old
	// ones expire.
	Max int
}

// NewReplayGuard returns a guard holding at most max nonces (0: 1<<20, a million headers
// within the window: over 30 000 requests a second).
func NewReplayGuard(max int) *ReplayGuard {
	if max <= 0 {
		max = 1 << 20
	}
	g := &ReplayGuard{Max: max}
	g.mu.seen = map[string]time.Time{}
	return g
}

// Fresh records nonce and reports whether it was new. Expired nonces are swept when the map
// reaches half of Max or every call past it.
func (g *ReplayGuard) Fresh(nonce string, issued, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.mu.seen[nonce]; dup {
		return false
	}
	if len(g.mu.seen) >= g.Max/2 {
		for n, exp := range g.mu.seen {
			if now.After(exp) {
				delete(g.mu.seen, n)
			}
		}
		if len(g.mu.seen) >= g.Max {
			return false
		}
	}
	g.mu.seen[nonce] = issued.Add(2 * MaxSkew)
	return true
}
