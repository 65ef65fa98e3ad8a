package apikey

import (
	"crypto/sha256"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  []string
		key   string
		match bool
		index int
	}{
		{"empty set", nil, "k", false, 0},
		{"empty set, empty key", nil, "", false, 0},
		{"empty keys skipped", []string{"", ""}, "", false, 0},
		{"empty key never matches", []string{"a", ""}, "", false, 0},
		{"first", []string{"a", "b", "c"}, "a", true, 0},
		{"middle", []string{"a", "b", "c"}, "b", true, 1},
		{"last", []string{"a", "b", "c"}, "c", true, 2},
		{"prefix of a key", []string{"secret"}, "secr", false, 0},
		{"key plus a suffix", []string{"secret"}, "secret2", false, 0},
		{"case matters", []string{"Secret"}, "secret", false, 0},
		{"spaces are part of the key", []string{"secret"}, " secret", false, 0},
		{"duplicate: the last entry", []string{"a", "a"}, "a", true, 1},
		{"long key", []string{strings.Repeat("x", 4096)}, strings.Repeat("x", 4096), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSet(tc.keys...)
			if have := s.Match(tc.key); have != tc.match {
				t.Errorf("Match(%q) = %v, want %v", tc.key, have, tc.match)
			}
			i, ok := s.Index(tc.key)
			if ok != tc.match || i != tc.index {
				t.Errorf("Index(%q) = %d, %v, want %d, %v", tc.key, i, ok, tc.index, tc.match)
			}
		})
	}
}

func TestSetLen(t *testing.T) {
	if have := NewSet("a", "", "b").Len(); have != 2 {
		t.Errorf("Len = %d, want 2 (the empty key is skipped)", have)
	}
	var s Set
	if s.Len() != 0 || s.Match("") {
		t.Errorf("zero Set: Len %d, Match(\"\") %v; want 0, false", s.Len(), s.Match(""))
	}
	s.AddDigest(sha256.Sum256([]byte("k")))
	if i, ok := s.Index("k"); !ok || i != 0 {
		t.Errorf("AddDigest: Index(k) = %d, %v, want 0, true", i, ok)
	}
}

func TestFromRequest(t *testing.T) {
	serve, serveQuery := Rule{}, Rule{Query: true}
	route, routeQuery := Rule{AuthorizationDecides: true}, Rule{AuthorizationDecides: true, Query: true}
	for _, tc := range []struct {
		name             string
		auth, xkey, rawq string
		rule             Rule
		want             string
	}{
		{"nothing", "", "", "", serve, ""},
		{"bearer", "Bearer k", "", "", serve, "k"},
		{"bearer, any case", "bEaReR k", "", "", serve, "k"},
		{"bearer trimmed", "Bearer   k  ", "", "", serve, "k"},
		{"bearer wins over x-api-key", "Bearer k", "x", "", serve, "k"},
		{"x-api-key", "", " x ", "", serve, "x"},
		{"empty bearer: no x-api-key", "Bearer ", "x", "", serve, ""},
		{"serve: other scheme falls back", "Basic abc", "x", "", serve, "x"},
		{"serve: bare Bearer falls back", "Bearer", "x", "", serve, "x"},
		{"route: other scheme presents none", "Basic abc", "x", "", route, ""},
		{"route: bare Bearer presents none", "Bearer", "x", "", route, ""},
		{"route: bearer", "Bearer k", "x", "", route, "k"},
		{"route: x-api-key", "", "x", "", route, "x"},
		{"no query without the rule", "", "", "key=q", serve, ""},
		{"query", "", "", "key=q", serveQuery, "q"},
		{"query not trimmed", "", "", "key=+q+", serveQuery, " q "},
		{"header wins over query", "Bearer k", "", "key=q", serveQuery, "k"},
		{"serve: empty bearer, query", "Bearer  ", "x", "key=q", serveQuery, "q"},
		{"route: other scheme, query", "Basic abc", "x", "key=q", routeQuery, "q"},
		{"route: x-api-key over query", "", "x", "key=q", routeQuery, "x"},
		{"bad query", "", "", "key=%zz", serveQuery, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/dashboard", nil)
			r.URL.RawQuery = tc.rawq
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.xkey != "" {
				r.Header.Set("X-Api-Key", tc.xkey)
			}
			if have := FromRequest(r, tc.rule); have != tc.want {
				t.Errorf("FromRequest(Authorization %q, x-api-key %q, ?%s, %+v) = %q, want %q", tc.auth, tc.xkey, tc.rawq, tc.rule, have, tc.want)
			}
		})
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		auth string
		want string
		ok   bool
	}{
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", true},
		{"Bearer k", "k", true},
		{"BEARER  k ", "k", true},
		{"Basic k", "", false},
		{"Bearerk", "", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", tc.auth)
		if have, ok := Bearer(r); have != tc.want || ok != tc.ok {
			t.Errorf("Bearer(%q) = %q, %v, want %q, %v", tc.auth, have, ok, tc.want, tc.ok)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"one", "k\n", []string{"k"}},
		{"no final newline", "a\nb", []string{"a", "b"}},
		{"trimmed, blank lines skipped", "  a \n\n\t\r\n b\r\n", []string{"a", "b"}},
		{"no comments", "# a\nb", []string{"# a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			have, err := ReadFile(p)
			if err != nil || !slices.Equal(have, tc.want) {
				t.Errorf("ReadFile(%q) = %q, %v, want %q", tc.text, have, err, tc.want)
			}
		})
	}
	if have, err := ReadFile(""); have != nil || err != nil {
		t.Errorf("ReadFile(\"\") = %q, %v, want none", have, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("ReadFile of a missing file: no error")
	}
}

// serveOracle and routeOracle are the parsers serve and route had before this package, kept
// as the oracle FuzzFromRequest checks against.
func serveOracle(auth, xkey, q string, query bool) string {
	scheme, key, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		key, ok = "", false
	} else {
		key = strings.TrimSpace(key)
	}
	if !ok {
		key = strings.TrimSpace(xkey)
	}
	if key == "" && query {
		key = q
	}
	return key
}

func routeOracle(auth, xkey, q string, query bool) string {
	var key string
	if auth != "" {
		scheme, k, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(k)
		}
	} else {
		key = strings.TrimSpace(xkey)
	}
	if key == "" && query {
		key = q
	}
	return key
}

// FuzzFromRequest: the Authorization and x-api-key headers and the query are bytes from the
// network. The parser must not panic, must agree with serve's and route's former parsers,
// and must return a trimmed header value, the query's key or nothing.
func FuzzFromRequest(f *testing.F) {
	for _, s := range [][3]string{
		{"Bearer k", "", ""}, {"bearer  k ", "x", ""}, {"Basic abc", "x", "key=q"}, {"Bearer", "x", ""},
		{"", " x ", "key=q"}, {"Bearer ", "", "key=%zz"}, {"\x00", "\xff", "key=a&key=b"},
	} {
		f.Add(s[0], s[1], s[2], true, false)
	}
	f.Fuzz(func(t *testing.T, auth, xkey, rawq string, query, decides bool) {
		q, _ := url.ParseQuery(rawq)
		qkey := q.Get("key")
		have := presented(auth, xkey, qkey, Rule{Query: query, AuthorizationDecides: decides})
		want := serveOracle(auth, xkey, qkey, query)
		if decides {
			want = routeOracle(auth, xkey, qkey, query)
		}
		if have != want {
			t.Fatalf("presented(%q, %q, %q, query %v, decides %v) = %q, the former parser says %q", auth, xkey, qkey, query, decides, have, want)
		}
		if auth == "" && have != presented(auth, xkey, qkey, Rule{Query: query, AuthorizationDecides: !decides}) {
			t.Fatalf("without Authorization the rules disagree on %q", xkey)
		}
		if have != "" && have != qkey && have != strings.TrimSpace(have) {
			t.Fatalf("header key %q is not trimmed", have)
		}
		if have != "" && !query && !strings.Contains(auth, have) && !strings.Contains(xkey, have) {
			t.Fatalf("key %q comes from no header (%q, %q)", have, auth, xkey)
		}
	})
}
