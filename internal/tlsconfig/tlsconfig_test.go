package tlsconfig_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stockpot/internal/tlsconfig"
	"stockpot/internal/tlsconfig/tlstest"
)

// TestMisconfigurations: every wrong combination fails with the flag and the cause named.
func TestMisconfigurations(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	srv, cli := ca.Server("srv"), ca.Client("cli")
	foreign := other.Server("foreign")
	expired := ca.Expired("old")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("not pem\n"), 0o600)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		f    tlsconfig.ServerFiles
		want string
	}{
		{"cert without key", tlsconfig.ServerFiles{Cert: srv.CertFile}, "TLS needs both --tls-cert and --tls-key"},
		{"key without cert", tlsconfig.ServerFiles{Key: srv.KeyFile}, "TLS needs both --tls-cert and --tls-key"},
		{"client CA alone", tlsconfig.ServerFiles{ClientCA: ca.CertFile}, "TLS needs both"},
		{"missing cert", tlsconfig.ServerFiles{Cert: missing, Key: srv.KeyFile}, "--tls-cert: stat"},
		{"missing key", tlsconfig.ServerFiles{Cert: srv.CertFile, Key: missing}, "--tls-key: stat"},
		{"key of another cert", tlsconfig.ServerFiles{Cert: srv.CertFile, Key: foreign.KeyFile}, "private key does not match"},
		{"junk cert", tlsconfig.ServerFiles{Cert: junk, Key: srv.KeyFile}, "--tls-cert " + junk},
		{"expired", tlsconfig.ServerFiles{Cert: expired.CertFile, Key: expired.KeyFile}, "not now"},
		{"junk client CA", tlsconfig.ServerFiles{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: junk}, "--tls-client-ca " + junk + ": no PEM certificate"},
		{"missing client CA", tlsconfig.ServerFiles{Cert: srv.CertFile, Key: srv.KeyFile, ClientCA: missing}, "--tls-client-ca: open"},
	} {
		_, err := tlsconfig.Server(tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		f    tlsconfig.ClientFiles
		want string
	}{
		{"cert without key", tlsconfig.ClientFiles{Cert: cli.CertFile}, "needs both --backend-tls-cert and --backend-tls-key"},
		{"junk CA", tlsconfig.ClientFiles{CA: junk}, "--backend-tls-ca " + junk + ": no PEM certificate"},
		{"mismatch", tlsconfig.ClientFiles{Cert: cli.CertFile, Key: srv.KeyFile}, "private key does not match"},
	} {
		_, err := tlsconfig.Client(tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("client %s: err %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if c, err := tlsconfig.Server(tlsconfig.ServerFiles{}); c != nil || err != nil {
		t.Errorf("no files: %v %v, want nil nil", c, err)
	}
	if c, err := tlsconfig.Client(tlsconfig.ClientFiles{}); c != nil || err != nil {
		t.Errorf("no client files: %v %v, want nil nil", c, err)
	}
}

// TestMutualTLS: a listener with a client CA admits a client with a certificate that CA
// signed, and refuses one without a certificate and one signed by another CA.
func TestMutualTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	srvLeaf, cli, stranger := ca.Server("srv"), ca.Client("router"), other.Client("stranger")
	scfg, err := tlsconfig.Server(tlsconfig.ServerFiles{Cert: srvLeaf.CertFile, Key: srvLeaf.KeyFile, ClientCA: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	if scfg.ClientAuth != tls.RequireAndVerifyClientCert || scfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server config: client auth %v, min version %x", scfg.ClientAuth, scfg.MinVersion)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	ts.TLS = scfg
	ts.StartTLS()
	defer ts.Close()
	get := func(f tlsconfig.ClientFiles) (string, error) {
		ccfg, err := tlsconfig.Client(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: ccfg, DialContext: (&net.Dialer{}).DialContext}}
		resp, err := c.Get(ts.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	if got, err := get(tlsconfig.ClientFiles{CA: ca.CertFile, Cert: cli.CertFile, Key: cli.KeyFile}); err != nil || got != "router" {
		t.Errorf("router with its certificate: %q, %v", got, err)
	}
	if _, err := get(tlsconfig.ClientFiles{CA: ca.CertFile}); err == nil {
		t.Error("a client without a certificate was admitted")
	}
	if _, err := get(tlsconfig.ClientFiles{CA: ca.CertFile, Cert: stranger.CertFile, Key: stranger.KeyFile}); err == nil {
		t.Error("a client with another CA's certificate was admitted")
	}
	if _, err := get(tlsconfig.ClientFiles{CA: other.CertFile, Cert: cli.CertFile, Key: cli.KeyFile}); err == nil {
		t.Error("the client trusted a server its CA did not sign")
	}
}
