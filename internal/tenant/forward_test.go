package tenant

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	ten := &Tenant{Name: "acme", Namespace: "acme-ns", PublicReads: true}
	h := Sign("backend-key", ten, now)
	g := NewReplayGuard(0)
	c, err := Verify("backend-key", h, now.Add(time.Second), g)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Name != "acme" || c.Namespace != "acme-ns" || !c.PublicReads || !c.IssuedAt.Equal(now) {
		t.Fatalf("claims = %+v", c)
	}
	if got := c.Tenant().Salt("s"); got != ten.Salt("s") {
		t.Fatalf("claimed tenant's salt differs from the tenant's")
	}
	if _, err := Verify("backend-key", h, now.Add(2*time.Second), g); !errors.Is(err, ErrHeaderReplayed) {
		t.Fatalf("replay: %v, want ErrHeaderReplayed", err)
	}
	for name, tc := range map[string]struct {
		key, value string
		at         time.Time
		want       error
	}{
		"wrong key":    {"other", Sign("backend-key", ten, now), now, ErrHeaderSignature},
		"no key":       {"", Sign("backend-key", ten, now), now, ErrHeaderSignature},
		"forged ns":    {"backend-key", strings.Replace(Sign("backend-key", ten, now), "ns=acme-ns", "ns=globex", 1), now, ErrHeaderSignature},
		"client-made":  {"backend-key", "v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00", now, ErrHeaderSignature},
		"no sig":       {"backend-key", "v1 name=acme", now, ErrHeaderMalformed},
		"stale":        {"backend-key", Sign("backend-key", ten, now), now.Add(MaxSkew + time.Second), ErrHeaderStale},
		"future":       {"backend-key", Sign("backend-key", ten, now), now.Add(-MaxSkew - time.Second), ErrHeaderStale},
		"signed noise": {"k", signWith("k", Claims{Name: "a b", Namespace: "x", Nonce: strings.Repeat("0", 32)}), time.UnixMilli(0), ErrHeaderMalformed},
	} {
		if _, err := Verify(tc.key, tc.value, tc.at, NewReplayGuard(0)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
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

// FuzzVerify: the identity header is bytes from the network: Verify never panics, and what it
// accepts is exactly what the key signed.
func FuzzVerify(f *testing.F) {
	now := time.Unix(2_000_000, 0)
	f.Add(Sign("k", &Tenant{Name: "acme", Namespace: "acme", PublicReads: true}, now))
	f.Add("v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00")
	f.Add(" sig=")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		c, err := Verify("k", v, now, NewReplayGuard(0))
		if err != nil {
			return
		}
		if got := signWith("k", c); got != v {
			t.Fatalf("accepted %q, which re-signs as %q", v, got)
		}
		if !validIdentifier(c.Name) || !validIdentifier(c.Namespace) {
			t.Fatalf("accepted claims %+v", c)
		}
	})
}
