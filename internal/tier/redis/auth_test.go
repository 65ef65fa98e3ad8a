package redis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

var authIdentity = [32]byte{0xa7}

// roundTrip puts recs into s and reads them back verified; it returns the first error.
func roundTrip(s *Store, recs []*tier.Record) error {
	ctx := context.Background()
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		return err
	}
	vals, err := s.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		return err
	}
	for i, v := range vals {
		if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
	}
	return nil
}

// A Redis with requirepass (the manifests' AUTH): the store AUTHs with Config.Password (the
// password file) or the URL's password, and without one every call fails.
func TestRequirePass(t *testing.T) {
	const pw = "correct horse battery staple"
	srv := startServer(t, "--requirepass", pw)
	recs := tiertest.Chain(authIdentity, prefix.Root(authIdentity[:], ""), tiertest.SmallLayout, 3, 61)
	for name, c := range map[string]struct {
		url, password string
		ok            bool
	}{
		"password file": {srv.url(), pw, true},
		"URL password":  {"redis://:" + strings.ReplaceAll(pw, " ", "%20") + "@" + srv.addr() + "/0", "", true},
		"file over URL": {"redis://:wrong@" + srv.addr() + "/0", pw, true},
		"none":          {srv.url(), "", false},
		"wrong":         {srv.url(), "wrong", false},
	} {
		cfg := DefaultConfig()
		cfg.IdentityDigest, cfg.Password, cfg.CallTimeout = authIdentity, c.password, 5*time.Second
		s, err := Open(c.url, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = roundTrip(s, recs)
		s.Close()
		if (err == nil) != c.ok {
			t.Errorf("%s: round trip error %v, want ok %v", name, err, c.ok)
		}
	}
}

// A Redis that speaks only TLS (tls-port, port 0) with AUTH, its certificate signed by a CA of
// its own (the manifests' cert Secret): a rediss:// URL with Config.RootCAs and the password
// works; without the CA the handshake fails; a CA with a redis:// URL is refused at Open.
func TestTLS(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found in PATH (%v)", err)
	}
	dir := t.TempDir()
	pool := writeCerts(t, dir)
	const pw = "tls and a password"
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"), "--tls-auth-clients", "no", "--requirepass", pw,
		"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no", "--loglevel", "warning")
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Ready when the TLS handshake succeeds.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("TLS redis-server on %s not ready: %v\n%s", addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs := tiertest.Chain(authIdentity, prefix.Root(authIdentity[:], ""), tiertest.SmallLayout, 3, 62)
	cfg := DefaultConfig()
	cfg.IdentityDigest, cfg.Password, cfg.CallTimeout, cfg.RootCAs = authIdentity, pw, 5*time.Second, pool
	s, err := Open("rediss://"+addr+"/0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(s, recs); err != nil {
		t.Fatalf("rediss:// with the CA and the password: %v", err)
	}
	s.Close()

	noCA := cfg
	noCA.RootCAs = nil
	if s, err = Open("rediss://"+addr+"/0", noCA); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(s, recs); err == nil {
		t.Fatal("rediss:// without the server's CA: round trip succeeded")
	}
	s.Close()

	if _, err := Open("redis://"+addr+"/0", cfg); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Fatalf("a CA with a redis:// URL: %v, want refused", err)
	}
}

// writeCerts writes a CA (ca.crt) and a server certificate for 127.0.0.1 it signed (tls.crt,
// tls.key) into dir, and returns a pool holding the CA.
func writeCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stockpot test redis CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, blk := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}
