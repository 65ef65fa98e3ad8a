// Package tlstest makes certificates for tests, in process (crypto/x509, ECDSA P-256): a CA
// and leaves it signs for 127.0.0.1 and localhost, written as PEM files under a test's
// temporary directory. Never for production: keys are unencrypted and validity is a day.
package tlstest
