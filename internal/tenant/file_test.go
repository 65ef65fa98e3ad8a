package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stockpot/internal/kvtier"
)

var (
	keyA = HashKey("key-a")
	keyB = HashKey("key-b")
)

func TestParseYAMLAndJSON(t *testing.T) {
	yamlFile := `tenants:
  - name: acme
    keys: ["` + keyA + `"]
    quotas: {cache_bytes: 1GiB, requests_per_second: 50, concurrent: 8}
    public_reads: true
  - name: globex
    namespace: globex-ns
    keys:
      - ` + keyB + `
    quotas:
      cache_bytes: {device: 256MiB, host: 2GiB}
      burst: 4
`
	jsonFile := `{"tenants": [
  {"name": "acme", "keys": ["` + keyA + `"], "quotas": {"cache_bytes": "1GiB", "requests_per_second": 50, "concurrent": 8}, "public_reads": true},
  {"name": "globex", "namespace": "globex-ns", "keys": ["` + keyB + `"], "quotas": {"cache_bytes": {"device": "256MiB", "host": "2GiB"}, "burst": 4}}
]}`
	for name, src := range map[string]string{"yaml": yamlFile, "json": jsonFile} {
		s, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Len() != 2 {
			t.Fatalf("%s: %d tenants, want 2", name, s.Len())
		}
		a, g := s.Lookup("acme"), s.Lookup("globex")
		if a.Namespace != "acme" || !a.PublicReads || a.Quotas.Concurrent != 8 || a.Quotas.RequestsPerSecond != 50 {
			t.Errorf("%s: acme = %+v", name, a)
		}
		for tier := range kvtier.Count {
			if a.Quotas.CacheBytes[tier] != 1<<30 {
				t.Errorf("%s: acme cache_bytes[%v] = %d, want 1GiB", name, kvtier.Tier(tier), a.Quotas.CacheBytes[tier])
			}
		}
		if g.Namespace != "globex-ns" || g.PublicReads || g.Quotas.Burst != 4 ||
			g.Quotas.CacheBytes[kvtier.Device] != 256<<20 || g.Quotas.CacheBytes[kvtier.Host] != 2<<30 || g.Quotas.CacheBytes[kvtier.Disk] != 0 {
			t.Errorf("%s: globex = %+v", name, g)
		}
		if got := s.Authenticate("key-a"); got != a {
			t.Errorf("%s: key-a authenticates %v, want acme", name, got)
		}
		if got := s.Authenticate("key-b"); got != g {
			t.Errorf("%s: key-b authenticates %v, want globex", name, got)
		}
		for _, k := range []string{"", "key-c", "key-a ", keyA} {
			if got := s.Authenticate(k); got != nil {
				t.Errorf("%s: %q authenticates %s, want nobody", name, k, got.Name)
			}
		}
	}
}

// TestParseErrors checks that every malformed file fails with the line of the problem.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"empty", "", 0, "empty"},
		{"not yaml", "tenants: [\n  {name: a\n", 1, "not YAML"},
		{"top level list", "- a\n", 1, "must be a mapping"},
		{"unknown top", "tenant:\n  - name: a\n", 1, `unknown field "tenant"`},
		{"no tenants", "tenants: []\n", 1, "no tenants"},
		{"unknown field", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quota: {}\n", 4, `unknown field "quota"`},
		{"plain key", "tenants:\n  - name: a\n    keys: [secret]\n", 3, "stored hashed"},
		{"short digest", "tenants:\n  - name: a\n    keys: [\"sha256:abcd\"]\n", 3, "4 hex digits"},
		{"bad hex", "tenants:\n  - name: a\n    keys: [\"sha256:" + strings.Repeat("zz", 32) + "\"]\n", 3, "not hex"},
		{"no name", "tenants:\n  - keys: [" + keyA + "]\n", 2, "needs a name"},
		{"no keys", "tenants:\n  - name: a\n", 2, "no keys"},
		{"bad name", "tenants:\n  - name: \"a b\"\n    keys: [" + keyA + "]\n", 2, "letters, digits"},
		{"dup name", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n  - name: a\n    keys: [" + keyB + "]\n", 4, "named twice"},
		{"dup namespace", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n  - name: b\n    namespace: a\n    keys: [" + keyB + "]\n", 4, "namespace \"a\""},
		{"dup key", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n  - name: b\n    keys:\n      - " + keyA + "\n", 6, "already listed on line 3"},
		{"dup field", "tenants:\n  - name: a\n    name: b\n    keys: [" + keyA + "]\n", 3, "given twice"},
		{"negative rate", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quotas:\n      requests_per_second: -1\n", 5, ">= 0"},
		{"bad concurrent", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quotas: {concurrent: 1.5}\n", 4, "whole number"},
		{"bad size", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quotas:\n      cache_bytes: 1 potato\n", 5, "unknown unit"},
		{"bad tier", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quotas:\n      cache_bytes: {gpu: 1GiB}\n", 5, "unknown tier"},
		{"unknown quota", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    quotas: {rps: 1}\n", 4, `unknown quota "rps"`},
		{"bad bool", "tenants:\n  - name: a\n    keys: [" + keyA + "]\n    public_reads: yes\n", 4, "true or false"},
		{"alias", "x: &k " + keyA + "\ntenants:\n  - name: a\n    keys: [*k]\n", 4, "aliases"},
		{"alias only", "tenants:\n  - &t {name: a, keys: [" + keyA + "]}\n  - *t\n", 3, "aliases"},
		{"json unknown", "{\"tenants\": [\n {\"name\": \"a\",\n  \"kees\": []}]}\n", 3, `unknown field "kees"`},
	} {
		_, err := Parse([]byte(tc.src))
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Errorf("%s: err = %v, want a *FileError", tc.name, err)
			continue
		}
		if fe.Line != tc.line || !strings.Contains(fe.Error(), tc.want) {
			t.Errorf("%s: err = %q (line %d), want line %d and %q", tc.name, fe.Error(), fe.Line, tc.line, tc.want)
		}
	}
}

func TestLoadNamesPathAndLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte("tenants:\n  - name: a\n    keys: [oops]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p+": tenants file line 3:") {
		t.Fatalf("Load: %v, want the path and line 3", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

// TestSaltConfinesClientSalt: no client salt of one namespace gives another namespace's salt,
// nor the public salt; the legacy namespace keeps salts as sent.
func TestSaltConfinesClientSalt(t *testing.T) {
	a := &Tenant{Name: "a", Namespace: "a"}
	b := &Tenant{Name: "ab", Namespace: "ab"}
	target := a.Salt("x")
	// Tries of tenant b to reach a's salt: spelling a's encoding, prefix games, the public tag.
	tries := []string{"", "x", target, "a" + "x", strings.TrimPrefix(target, tenantTag), PublicSalt(),
		"\x00stockpot/tenant\x00\x01\x00\x00\x00ax", tenantTag + "\x01\x00\x00\x00a" + "x"}
	for _, c := range tries {
		if got := b.Salt(c); got == target || got == PublicSalt() {
			t.Errorf("tenant ab with cache_salt %q reaches %q", c, got)
		}
	}
	if got := (*Tenant)(nil).Salt("s"); got != "s" {
		t.Errorf("legacy salt = %q, want it as sent", got)
	}
	if got := Single([]string{"k"}).Authenticate("k").Salt("s"); got != "s" {
		t.Errorf("--api-key tenant salt = %q, want it as sent", got)
	}
	// Injectivity over (namespace, client) pairs.
	seen := map[string][2]string{}
	for _, ns := range []string{"a", "ab", "b", "a.b"} {
		for _, c := range []string{"", "b", "ab", "\x00", "x"} {
			s := NamespaceSalt(ns, c)
			if prev, dup := seen[s]; dup {
				t.Errorf("(%q,%q) and %v share salt %q", ns, c, prev, s)
			}
			seen[s] = [2]string{ns, c}
		}
	}
}

func TestSingle(t *testing.T) {
	if Single(nil) != nil || Single([]string{""}) != nil {
		t.Fatal("Single without keys is not nil")
	}
	s := Single([]string{"k1", "k2"})
	if s.Authenticate("k1") == nil || s.Authenticate("k2") != s.Authenticate("k1") || s.Authenticate("k3") != nil {
		t.Fatal("Single does not authenticate its keys only")
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/files/*")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("tenants:\n  - name: a\n    keys: [" + keyA + "]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FileError", err)
			}
			return
		}
		// A parsed set names each tenant once, with a namespace and keys.
		for i, ten := range s.Tenants() {
			if ten.Index != i || ten.Namespace == "" || len(ten.keys) == 0 || s.Lookup(ten.Name) != ten {
				t.Fatalf("tenant %d = %+v", i, ten)
			}
		}
	})
}
