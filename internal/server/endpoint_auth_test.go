package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// authMatrix renders the status of every endpoint kind for every key, one row per key.
func authMatrix(t *testing.T, mod func(*Config), keys []string) string {
	t.Helper()
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) {
		c.CacheAdmin, c.BlockSize = &fakeCacheAdmin{poolBlocks: 4, blockSize: 16}, 16
		mod(c)
	})
	mux := http.NewServeMux()
	mux.Handle(eventsPath+"/", s.RequireEventsKey(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })))
	mux.Handle("/", s.Handler())
	endpoints := [][2]string{
		{"api", "/v1/models"}, {"admin", "/v1/cache"}, {"recent", recentRequestsPath}, {"events", eventsPath + "/snapshot"},
		{"dashboard", "/dashboard/state"}, {"metrics", "/metrics"}, {"health", "/health"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s", "key")
	for _, e := range endpoints {
		fmt.Fprintf(&b, " %s", e[0])
	}
	b.WriteByte('\n')
	for _, k := range keys {
		fmt.Fprintf(&b, "%-8s", k)
		for _, e := range endpoints {
			var hdr []string
			if k != "-" {
				hdr = []string{"Authorization", "Bearer " + k}
			}
			rec := do(mux, "GET", e[1], "", hdr...)
			fmt.Fprintf(&b, " %*d", len(e[0]), rec.Code)
			if rec.Code == 401 && !strings.Contains(rec.Body.String(), `"authentication_error"`) ||
				rec.Code == 403 && !strings.Contains(rec.Body.String(), `"permission_error"`) {
				t.Errorf("%s with %q: %d %s", e[1], k, rec.Code, rec.Body)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestEndpointKeys: each endpoint kind takes its own keys, an admin key grants every kind
// but the API, a known key on the wrong endpoint is a 403 and an unknown or missing one a 401.
func TestEndpointKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		keys []string
		want string
	}{{
		name: "every kind of key",
		mod: func(c *Config) {
			c.APIKeys, c.AdminKeys, c.EventsKeys, c.DashboardKeys, c.MetricsKey = []string{"api"}, []string{"adm"}, []string{"ev"}, []string{"dash"}, "met"
		},
		keys: []string{"-", "nope", "api", "adm", "ev", "dash", "met"},
		want: `
key      api admin recent events dashboard metrics health
-        401   401    401    401       401     401    200
nope     401   401    401    401       401     401    200
api      200   403    403    403       403     403    200
adm      403   200    200    200       200     200    200
ev       403   403    403    200       403     403    200
dash     403   403    403    403       200     403    200
met      403   403    403    403       403     200    200
`,
	}, {
		// No key at all: a laptop. Everything is open but the admin API, which is off.
		name: "no keys",
		mod:  func(c *Config) {},
		keys: []string{"-", "nope"},
		want: `
key      api admin recent events dashboard metrics health
-        200   403    403    200       200     200    200
nope     200   403    403    200       200     200    200
`,
	}, {
		// Only API keys: the operator endpoints are closed (403, no key grants them).
		name: "api keys only",
		mod:  func(c *Config) { c.APIKeys = []string{"api"} },
		keys: []string{"-", "api"},
		want: `
key      api admin recent events dashboard metrics health
-        401   403    403    403       403     403    200
api      200   403    403    403       403     403    200
`,
	}, {
		// Only an admin key: the API stays open (no API key), the rest needs the admin key;
		// --public-metrics opens /metrics on purpose.
		name: "admin key, public metrics",
		mod:  func(c *Config) { c.AdminKeys, c.PublicMetrics = []string{"adm"}, true },
		keys: []string{"-", "adm"},
		want: `
key      api admin recent events dashboard metrics health
-        200   401    401    401       401     200    200
adm      200   200    200    200       200     200    200
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := authMatrix(t, tc.mod, tc.keys); got != strings.TrimPrefix(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, strings.TrimPrefix(tc.want, "\n"))
			}
		})
	}
}

// TestEndpointKeyForms: x-api-key works as a bearer token does, and ?key= only on the dashboard.
func TestEndpointKeyForms(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.APIKeys, c.DashboardKeys, c.MetricsKey = []string{"api"}, []string{"dash"}, "met" })
	h := s.Handler()
	for _, tc := range []struct {
		path   string
		hdr    []string
		status int
	}{
		{"/metrics", []string{"X-Api-Key", "met"}, 200},
		{"/dashboard/state", []string{"X-Api-Key", "dash"}, 200},
		{"/dashboard/state?key=dash", nil, 200},
		{"/dashboard/state?key=api", nil, 403},
		{"/metrics?key=met", nil, 401},
		{"/v1/models?key=api", nil, 401},
	} {
		if rec := do(h, "GET", tc.path, "", tc.hdr...); rec.Code != tc.status {
			t.Errorf("%s %v: %d, want %d (%s)", tc.path, tc.hdr, rec.Code, tc.status, rec.Body)
		}
	}
}

// FuzzEndpointAuth: whatever path, key headers and query a request carries, the auth layer
// answers with a status the contract names (never a panic or a 5xx), and a refusal is in the
// API's error shape.
func FuzzEndpointAuth(f *testing.F) {
	for _, seed := range [][4]string{
		{"/v1/models", "Bearer api", "", ""}, {"/v1/kv-events/snapshot", "Bearer ev", "", ""},
		{"/dashboard/state", "", "", "key=dash"}, {"/metrics", "bearer  met ", "", ""},
		{"/v1/cache", "", "adm", ""}, {"/health", "Basic x", "", ""}, {"/nope", "Bearer", "\x00", "key=%zz"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	s, _ := newTestServer(f, newFakeGen("x"), func(c *Config) {
		c.APIKeys, c.AdminKeys, c.EventsKeys, c.DashboardKeys, c.MetricsKey = []string{"api"}, []string{"adm"}, []string{"ev"}, []string{"dash"}, "met"
		c.CacheAdmin, c.BlockSize = &fakeCacheAdmin{poolBlocks: 4, blockSize: 16}, 16
	})
	mux := http.NewServeMux()
	mux.Handle(eventsPath+"/", s.RequireEventsKey(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })))
	mux.Handle("/", s.Handler())
	f.Fuzz(func(t *testing.T, path, auth, xkey, query string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		// The request is already over: a stream it may open (/dashboard/events with the
		// dashboard key) answers its status and returns instead of streaming forever.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.URL.Path, req.URL.RawQuery = path, query
		req.Header.Set("Authorization", auth)
		req.Header.Set("X-Api-Key", xkey)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 301, 307, 308, 400, 401, 403, 404, 405:
		default:
			t.Fatalf("GET %q (auth %q, x-api-key %q, query %q): HTTP %d %s", path, auth, xkey, query, rec.Code, rec.Body)
		}
		if (rec.Code == 401 || rec.Code == 403) && !strings.Contains(rec.Body.String(), `"error"`) {
			t.Fatalf("refusal without the error shape: %s", rec.Body)
		}
	})
}

// TestEndpointKeysTenantHook: a tenants layer's keys (Config.TenantKey) close the operator
// endpoints and get 403s there, as API keys do.
func TestEndpointKeysTenantHook(t *testing.T) {
	got := authMatrix(t, func(c *Config) { c.TenantKey = func(k string) bool { return k == "tenant-key" } }, []string{"-", "tenant-key", "nope"})
	want := `key      api admin recent events dashboard metrics health
-        200   403    403    403       403     403    200
tenant-key 200   403    403    403       403     403    200
nope     200   403    403    403       403     403    200
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
