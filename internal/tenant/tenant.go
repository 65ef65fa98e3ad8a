package tenant

import (
	"context"
	"crypto/sha256"
	"encoding/binary"

	"stockpot/internal/apikey"
	"stockpot/internal/kvtier"
)

// Tenant is one principal of the tenants file: a name, the namespace its prompts are hashed
// under, its quotas and whether it may read the public namespace. A *Tenant is shared and
// never modified after Parse.
type Tenant struct {
	// Name identifies the tenant in metrics, logs and the forwarded identity header.
	Name string
	// Namespace is the cache namespace (the file's namespace, else Name); "" only for the
	// legacy single tenant (Single).
	Namespace string
	// PublicReads lets the tenant's prompts continue the public namespace's blocks (prefixes
	// an operator marked public); without it every block of its prompts is its own.
	PublicReads bool
	// Quotas are the tenant's limits; zero fields are unlimited.
	Quotas Quotas
	// Index is the tenant's position in its Set (0-based), for per-tenant tables.
	Index int

	keys [][sha256.Size]byte
}

// Quotas are per-tenant limits. Zero means unlimited.
type Quotas struct {
	// RequestsPerSecond refills the tenant's token bucket; Burst is its size (default: the
	// rate rounded up, at least 1).
	RequestsPerSecond float64
	Burst             int
	// Concurrent caps the tenant's requests running at once.
	Concurrent int
	// CacheBytes caps the bytes of the tenant's blocks per tier (indexed by kvtier.Tier):
	// past it, eviction in that tier takes the tenant's blocks first.
	CacheBytes [kvtier.Count]int64
}

// Owner is the tenant's number in the caches' per-owner quotas: its position in the file
// plus one; 0 (no owner, no quota) for a tenant that is not from a file (a router's claims).
func (t *Tenant) Owner() uint16 {
	if t == nil || t.Index < 0 || t.Index >= 1<<16-1 {
		return 0
	}
	return uint16(t.Index + 1)
}

// Salt is the salt the engine hashes into the chain root of the tenant's prompts, given the
// client's cache_salt (see the package doc for the encoding). A nil tenant is the legacy
// namespace: the client's salt as it is.
func (t *Tenant) Salt(client string) string {
	if t == nil || t.Namespace == "" {
		return client
	}
	return NamespaceSalt(t.Namespace, client)
}

// tenantTag and publicTag start every derived salt; the NUL bytes keep them out of the way of
// printable client salts, and the tags differ, so no tenant salt is the public salt.
const (
	tenantTag = "\x00stockpot/tenant\x00"
	publicTag = "\x00stockpot/public\x00"
)

// NamespaceSalt is Salt for a namespace (ns must not be ""): tenantTag || u32le(len(ns)) ||
// ns || client.
func NamespaceSalt(ns, client string) string {
	b := make([]byte, 0, len(tenantTag)+4+len(ns)+len(client))
	b = append(b, tenantTag...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ns)))
	b = append(b, ns...)
	b = append(b, client...)
	return string(b)
}

// PublicSalt is the salt of the public namespace: the blocks of prefixes an operator marked
// public, which every tenant with public_reads continues.
func PublicSalt() string { return publicTag }

// Set is the tenants of one file, immutable after Parse.
type Set struct {
	tenants []*Tenant
	byName  map[string]*Tenant
	// entry i of digests is a key digest of tenant owners[i]; every digest is compared on
	// each Authenticate (internal/apikey).
	digests apikey.Set
	owners  []int
}

// Tenants returns the tenants in file order (the caller must not modify them).
func (s *Set) Tenants() []*Tenant {
	if s == nil {
		return nil
	}
	return s.tenants
}

// Lookup returns the tenant named name, or nil.
func (s *Set) Lookup(name string) *Tenant {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Len is the number of tenants (0 for a nil Set).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.tenants)
}

// Authenticate returns the tenant whose key is key, or nil. It hashes key once and compares
// the digest with every stored digest in constant time; which tenant matched is selected
// without a data-dependent branch (apikey.Set.Index).
func (s *Set) Authenticate(key string) *Tenant {
	if s == nil || key == "" {
		return nil
	}
	i, ok := s.digests.Index(key)
	if !ok {
		return nil
	}
	return s.tenants[s.owners[i]]
}

// Single is the --api-key shorthand: one tenant, "default", in the legacy namespace (salts as
// the client sends them), holding keys (plain keys; hashed here), with no quotas and public
// reads. No keys gives a nil Set (no authentication).
func Single(keys []string) *Set {
	t := &Tenant{Name: DefaultName, PublicReads: true, Index: -1}
	s := &Set{tenants: []*Tenant{t}, byName: map[string]*Tenant{t.Name: t}}
	for _, k := range keys {
		if k == "" {
			continue
		}
		d := sha256.Sum256([]byte(k))
		t.keys = append(t.keys, d)
		s.digests.AddDigest(d)
		s.owners = append(s.owners, 0)
	}
	if s.digests.Len() == 0 {
		return nil
	}
	return s
}

// DefaultName is the tenant of --api-key's shorthand and of anonymous requests in metrics.
const DefaultName = "default"

type ctxKey struct{}

// WithContext returns ctx carrying t.
func WithContext(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the tenant the server attached to a request's context, or nil when the
// request is anonymous (no tenants, no API keys).
func FromContext(ctx context.Context) *Tenant {
	t, _ := ctx.Value(ctxKey{}).(*Tenant)
	return t
}

// NameOf is t's name, or DefaultName for nil (metrics' label for anonymous requests).
func NameOf(t *Tenant) string {
	if t == nil {
		return DefaultName
	}
	return t.Name
}
