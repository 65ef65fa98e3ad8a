package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// ServerFiles names a listener's PEM files. All empty: no TLS.
type ServerFiles struct {
	Cert, Key string // the server's certificate chain and its private key (both or neither)
	ClientCA  string // optional: require client certificates signed by this CA (mutual TLS)
	// Flag names for the error messages (defaults: --tls-cert, --tls-key, --tls-client-ca).
	CertFlag, KeyFlag, ClientCAFlag string
}

// Enabled reports whether any file is named.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// ClientFiles names the router's PEM files for its replicas. All empty: the system roots and
// no client certificate.
type ClientFiles struct {
	CA        string // optional: trust only this CA for the replicas' certificates
	Cert, Key string // optional: the client certificate and key (both or neither)
	CAFlag    string // flag names for the error messages
	CertFlag  string
	KeyFlag   string
}

// Enabled reports whether any file is named.
func (f ClientFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// MinVersion is the lowest protocol version either side accepts.
const MinVersion = tls.VersionTLS12

// now is the clock for the expiry check (tests).
var now = time.Now

// Server returns the listener's config, or nil (and no error) when f names no file.
func Server(f ServerFiles) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	certFlag, keyFlag, caFlag := or(f.CertFlag, "--tls-cert"), or(f.KeyFlag, "--tls-key"), or(f.ClientCAFlag, "--tls-client-ca")
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("TLS needs both %s and %s (got %s=%q, %s=%q)", certFlag, keyFlag, certFlag, f.Cert, keyFlag, f.Key)
	}
	cert, err := loadPair(f.Cert, f.Key, certFlag, keyFlag)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{cert}}
	if f.ClientCA != "" {
		pool, err := loadPool(f.ClientCA, caFlag)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the router's config for https replicas, or nil (and no error) when f names
// no file (Go's defaults: the system roots, no client certificate).
func Client(f ClientFiles) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	caFlag, certFlag, keyFlag := or(f.CAFlag, "--backend-tls-ca"), or(f.CertFlag, "--backend-tls-cert"), or(f.KeyFlag, "--backend-tls-key")
	cfg := &tls.Config{MinVersion: MinVersion}
	if f.CA != "" {
		pool, err := loadPool(f.CA, caFlag)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		cert, err := loadPair(f.Cert, f.Key, certFlag, keyFlag)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.Cert != "" || f.Key != "":
		return nil, fmt.Errorf("a client certificate needs both %s and %s (got %s=%q, %s=%q)", certFlag, keyFlag, certFlag, f.Cert, keyFlag, f.Key)
	}
	return cfg, nil
}

// loadPair reads a certificate chain and its key, and checks that they match and that the
// leaf is valid now (an expired certificate would only fail later, on every handshake).
func loadPair(certFile, keyFile, certFlag, keyFlag string) (tls.Certificate, error) {
	for _, p := range [][2]string{{certFlag, certFile}, {keyFlag, keyFile}} {
		if _, err := os.Stat(p[1]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s: %w", p[0], err)
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s %s with %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s %s: %w", certFlag, certFile, err)
		}
	}
	if t := now(); leaf != nil && (t.After(leaf.NotAfter) || t.Before(leaf.NotBefore)) {
		return tls.Certificate{}, fmt.Errorf("%s %s: the certificate is valid from %s to %s, not now (%s)",
			certFlag, certFile, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// errNoCerts: a CA file parsed, but held no certificate.
var errNoCerts = errors.New("no PEM certificate in the file")

func loadPool(file, flag string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %s: %w", flag, file, errNoCerts)
	}
	return pool, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
