package tenant

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
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

// Binding is the request a signed identity is good for: the header is bound to it, so a
// captured header says nothing on another request.
type Binding struct {
	Method string // the request's method ("POST")
	// Target is the request target as sent: the path and query, as url.URL.RequestURI
	// writes them (the router signs its outgoing request's, the replica checks its parsed
	// request's; the two agree because the one is parsed from the other).
	Target string
	Body   [sha256.Size]byte // SHA-256 of the body as sent (BodyDigest(nil) for none)
}

// BodyDigest is the SHA-256 a Binding carries for body.
func BodyDigest(body []byte) [sha256.Size]byte { return sha256.Sum256(body) }

// RequestBinding is the method and target of an incoming request, with no body digest (Verify
// takes the digest from the header; CheckBody checks it as the body is read).
func RequestBinding(method, target string) Binding { return Binding{Method: method, Target: target} }

// Claims is what a signed identity header says.
type Claims struct {
	Name        string
	Namespace   string
	PublicReads bool
	IssuedAt    time.Time // millisecond precision
	Nonce       string    // 32 hex digits, fresh per header
	// Body is the SHA-256 of the body the header was signed for: the signature covers it,
	// and CheckBody compares it with the body the replica reads.
	Body [sha256.Size]byte
}

// Tenant returns the tenant the claims describe (without keys or quotas: a replica that has
// its own tenants file looks the name up instead).
func (c Claims) Tenant() *Tenant {
	return &Tenant{Name: c.Name, Namespace: c.Namespace, PublicReads: c.PublicReads, Index: -1}
}

// Errors of Verify and CheckBody.
var (
	ErrHeaderMalformed = errors.New("tenant: malformed identity header")
	ErrHeaderSignature = errors.New("tenant: identity header signature does not verify for this request (it covers the method, path, query and body digest)")
	ErrHeaderStale     = errors.New("tenant: identity header outside the replay window")
	ErrHeaderReplayed  = errors.New("tenant: identity header replayed")
	ErrHeaderVersion   = errors.New("tenant: identity header of another version (router and replicas must run the same release: upgrade the replicas, then the router)")
	ErrHeaderBody      = errors.New("tenant: request body differs from the one the identity header was signed for")
)

// headerVersion marks the header's format. v1 (before 2026-12) signed no request binding; a
// v1 header is refused with ErrHeaderVersion, not taken for a bad signature, so an old
// router in front of a new replica fails with a clear word. (A new router in front of an old
// replica fails as a bad signature: the old replica cannot know better.)
const headerVersion = "v2"

// Sign returns the header value stating t's identity at now for the request b, signed with
// key (the shared --backend-key). Each call draws a fresh nonce.
func Sign(key string, t *Tenant, b Binding, now time.Time) string {
	var nb [16]byte
	_, _ = rand.Read(nb[:])
	return signWith(key, Claims{Name: t.Name, Namespace: t.Namespace, PublicReads: t.PublicReads,
		IssuedAt: now.Truncate(time.Millisecond), Nonce: hex.EncodeToString(nb[:]), Body: b.Body}, b)
}

// signWith is the header for c on the request b; b.Body is ignored (c.Body is signed).
func signWith(key string, c Claims, b Binding) string {
	pub := "0"
	if c.PublicReads {
		pub = "1"
	}
	fields := fmt.Sprintf("%s name=%s ns=%s pub=%s iat=%d nonce=%s body=%s", headerVersion, c.Name, c.Namespace, pub,
		c.IssuedAt.UnixMilli(), c.Nonce, hex.EncodeToString(c.Body[:]))
	return fields + " sig=" + mac(key, b.Method, b.Target, fields)
}

// mac is the hex HMAC-SHA256 of the request's method and target and the header's fields
// (everything before " sig=", which holds the body digest), under a label so the key signs
// nothing else by accident. Method and target go in length-prefixed, so no choice of them
// can move bytes between the two or into the fields.
func mac(key, method, target, fields string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("stockpot/tenant-header/v2\n"))
	var n [4]byte
	for _, s := range []string{method, target} {
		binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	m.Write([]byte(fields))
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a header value signed with key, at now, for the request b (its method and
// target; b.Body is not used: the signed digest comes back in Claims.Body, for CheckBody):
// the signature (constant time), the issue time within MaxSkew, and, when guard is not nil,
// that its nonce was not seen before.
func Verify(key, value string, b Binding, now time.Time, guard *ReplayGuard) (Claims, error) {
	var c Claims
	if key == "" {
		return c, ErrHeaderSignature
	}
	if v, _, _ := strings.Cut(value, " "); v != headerVersion && strings.HasPrefix(v, "v") && len(v) <= 4 {
		return c, fmt.Errorf("%w: got %.4q, this replica reads %s", ErrHeaderVersion, v, headerVersion)
	}
	fields, sig, ok := strings.Cut(value, " sig=")
	if !ok {
		return c, ErrHeaderMalformed
	}
	want := mac(key, b.Method, b.Target, fields)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return c, ErrHeaderSignature
	}
	parts := strings.Split(fields, " ")
	if len(parts) != 7 || parts[0] != headerVersion {
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
	d, err := hex.DecodeString(vals["body"])
	if err != nil || len(d) != len(c.Body) {
		return c, ErrHeaderMalformed
	}
	copy(c.Body[:], d)
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

// CheckBody returns body wrapped so that reading it to its end fails with ErrHeaderBody,
// in place of io.EOF, when its SHA-256 is not the one c was signed for. The digest is taken
// as the body streams through (no copy); a body never read to its end is never checked, so
// the reader of a request whose meaning is in its body reads it whole (the server's readBody
// does). A nil body is the empty body.
func (c Claims) CheckBody(body io.ReadCloser) io.ReadCloser {
	if body == nil {
		body = io.NopCloser(strings.NewReader(""))
	}
	return &bodyCheck{ReadCloser: body, want: c.Body, h: sha256.New()}
}

type bodyCheck struct {
	io.ReadCloser
	want [sha256.Size]byte
	h    hash.Hash
	bad  bool // the digest did not match: every later read fails too
}

func (b *bodyCheck) Read(p []byte) (int, error) {
	if b.bad {
		return 0, ErrHeaderBody
	}
	n, err := b.ReadCloser.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF {
		var got [sha256.Size]byte
		if !hmac.Equal(b.h.Sum(got[:0]), b.want[:]) {
			b.bad = true
			return n, ErrHeaderBody
		}
	}
	return n, err
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
