package tenant

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// testBinding is a request a header is signed for in these tests.
var testBinding = Binding{Method: "POST", Target: "/v1/chat/completions?x=1", Body: BodyDigest([]byte(`{"model":"m"}`))}

func TestSignVerify(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	ten := &Tenant{Name: "acme", Namespace: "acme-ns", PublicReads: true}
	h := Sign("backend-key", ten, testBinding, now)
	g := NewReplayGuard(0)
	line := RequestBinding(testBinding.Method, testBinding.Target)
	c, err := Verify("backend-key", h, line, now.Add(time.Second), g)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Name != "acme" || c.Namespace != "acme-ns" || !c.PublicReads || !c.IssuedAt.Equal(now) || c.Body != testBinding.Body {
		t.Fatalf("claims = %+v", c)
	}
	if got := c.Tenant().Salt("s"); got != ten.Salt("s") {
		t.Fatalf("claimed tenant's salt differs from the tenant's")
	}
	if _, err := Verify("backend-key", h, line, now.Add(2*time.Second), g); !errors.Is(err, ErrHeaderReplayed) {
		t.Fatalf("replay: %v, want ErrHeaderReplayed", err)
	}
	sign := func(key string, at time.Time) string { return Sign(key, ten, testBinding, at) }
	for name, tc := range map[string]struct {
		key, value string
		line       Binding
		at         time.Time
		want       error
	}{
		"wrong key":   {"other", sign("backend-key", now), line, now, ErrHeaderSignature},
		"no key":      {"", sign("backend-key", now), line, now, ErrHeaderSignature},
		"forged ns":   {"backend-key", strings.Replace(sign("backend-key", now), "ns=acme-ns", "ns=globex", 1), line, now, ErrHeaderSignature},
		"client-made": {"backend-key", "v2 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 body=00 sig=00", line, now, ErrHeaderSignature},
		"no sig":      {"backend-key", "v2 name=acme", line, now, ErrHeaderMalformed},
		"stale":       {"backend-key", sign("backend-key", now), line, now.Add(MaxSkew + time.Second), ErrHeaderStale},
		"future":      {"backend-key", sign("backend-key", now), line, now.Add(-MaxSkew - time.Second), ErrHeaderStale},
		"signed noise": {"k", signWith("k", Claims{Name: "a b", Namespace: "x", Nonce: strings.Repeat("0", 32)}, line),
			line, time.UnixMilli(0), ErrHeaderMalformed},
		// The binding: the same header on another request is refused.
		"other path":   {"backend-key", sign("backend-key", now), RequestBinding("POST", "/v1/completions?x=1"), now, ErrHeaderSignature},
		"other query":  {"backend-key", sign("backend-key", now), RequestBinding("POST", "/v1/chat/completions?x=2"), now, ErrHeaderSignature},
		"no query":     {"backend-key", sign("backend-key", now), RequestBinding("POST", "/v1/chat/completions"), now, ErrHeaderSignature},
		"other method": {"backend-key", sign("backend-key", now), RequestBinding("PUT", "/v1/chat/completions?x=1"), now, ErrHeaderSignature},
		"forged body":  {"backend-key", swapBody(sign("backend-key", now)), line, now, ErrHeaderSignature},
		// Method and target are length-prefixed: moving a byte from one to the other changes the MAC.
		"shifted": {"backend-key", Sign("backend-key", ten, Binding{Method: "POST/", Target: "v1"}, now), RequestBinding("POST", "/v1"), now, ErrHeaderSignature},
		// An old router's header says why it fails.
		"v1 header": {"backend-key", "v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00", line, now, ErrHeaderVersion},
	} {
		if _, err := Verify(tc.key, tc.value, tc.line, tc.at, NewReplayGuard(0)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// swapBody replaces a header's body digest with another body's.
func swapBody(h string) string {
	i := strings.Index(h, "body=") + len("body=")
	other := BodyDigest([]byte("other"))
	const hexd = "0123456789abcdef"
	b := []byte(h)
	for j, x := range other {
		b[i+2*j], b[i+2*j+1] = hexd[x>>4], hexd[x&15]
	}
	return string(b)
}

// TestCheckBody: the body read through CheckBody ends in io.EOF only when it is the body the
// header was signed for; another body (longer, shorter, changed, none) ends in ErrHeaderBody,
// and stays failed.
func TestCheckBody(t *testing.T) {
	body := `{"model":"m"}`
	c := Claims{Body: BodyDigest([]byte(body))}
	read := func(s string) error {
		_, err := io.ReadAll(c.CheckBody(io.NopCloser(strings.NewReader(s))))
		return err
	}
	if err := read(body); err != nil {
		t.Fatalf("signed body: %v", err)
	}
	for _, other := range []string{"", body + " ", body[:len(body)-1], strings.Replace(body, "m", "n", 1)} {
		if err := read(other); !errors.Is(err, ErrHeaderBody) {
			t.Errorf("body %q: %v, want ErrHeaderBody", other, err)
		}
	}
	r := c.CheckBody(io.NopCloser(strings.NewReader("x")))
	_, _ = io.ReadAll(r)
	if n, err := r.Read(make([]byte, 8)); n != 0 || !errors.Is(err, ErrHeaderBody) {
		t.Errorf("read after a mismatch: %d %v, want ErrHeaderBody again", n, err)
	}
	empty := Claims{Body: BodyDigest(nil)}
	if _, err := io.ReadAll(empty.CheckBody(nil)); err != nil {
		t.Errorf("no body, signed as none: %v", err)
	}
	if _, err := io.ReadAll(c.CheckBody(nil)); !errors.Is(err, ErrHeaderBody) {
		t.Errorf("no body, signed with one: %v, want ErrHeaderBody", err)
	}
}

func TestReplayGuardBounded(t *testing.T) {
	g := NewReplayGuard(4)
	now := time.Unix(0, 0)
	for i, n := range []string{"a", "b", "c", "d"} {
		if !g.Fresh(n, now, now) {
			t.Fatalf("nonce %d refused", i)
		}
	}
	if g.Fresh("e", now, now) {
		t.Fatal("a full guard accepted a new nonce")
	}
	later := now.Add(3 * MaxSkew)
	if !g.Fresh("e", later, later) {
		t.Fatal("expired nonces were not swept")
	}
}

// FuzzVerify: the identity header is bytes from the network, and so are the method and target
// it is checked against: Verify never panics, and what it accepts is exactly what the key
// signed for that request.
func FuzzVerify(f *testing.F) {
	now := time.Unix(2_000_000, 0)
	f.Add(Sign("k", &Tenant{Name: "acme", Namespace: "acme", PublicReads: true}, testBinding, now), testBinding.Method, testBinding.Target)
	f.Add(Sign("k", &Tenant{Name: "acme", Namespace: "acme"}, Binding{Method: "GET", Target: "/v1/models"}, now), "GET", "/v1/models")
	f.Add("v2 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 body=00 sig=00", "POST", "/")
	f.Add("v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00", "POST", "/")
	f.Add(" sig=", "", "")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, v, method, target string) {
		line := RequestBinding(method, target)
		c, err := Verify("k", v, line, now, NewReplayGuard(0))
		if err != nil {
			return
		}
		if got := signWith("k", c, line); got != v {
			t.Fatalf("accepted %q, which re-signs as %q", v, got)
		}
		if !validIdentifier(c.Name) || !validIdentifier(c.Namespace) {
			t.Fatalf("accepted claims %+v", c)
		}
	})
}
