package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"stockpot/internal/offload"
	"stockpot/internal/tier"
)

// tierSecurity loads the lower tiers' secrets into to: the record keys (--tier-key-file,
// repeatable; the first key of the first file signs), the remote tier's password
// (--remote-cache-password-file) and the CA its rediss:// server is checked against
// (--remote-cache-ca-file). With a remote tier and no key it warns: whoever can write to the
// Redis can then plant blocks that are restored as hits.
func tierSecurity(to *offload.Config, keyFiles []string, passwordFile, caFile string, logger *slog.Logger) error {
	keys, err := tier.LoadKeyring(keyFiles)
	if err != nil {
		return fmt.Errorf("--tier-key-file: %w", err)
	}
	to.Keys = keys
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return fmt.Errorf("--remote-cache-password-file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return errors.New("--remote-cache-password-file: the file is empty")
		}
		to.Remote.Password = pw
	}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("--remote-cache-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("--remote-cache-ca-file %s: no PEM certificate in it", caFile)
		}
		to.Remote.RootCAs = pool
	}
	if (passwordFile != "" || caFile != "") && to.RemoteURL == "" {
		return errors.New("--remote-cache-password-file and --remote-cache-ca-file need --remote-cache")
	}
	if to.RemoteURL != "" && keys == nil {
		logger.Warn("the remote tier's records are not authenticated: anyone who can write to its Redis can plant blocks that are restored as cache hits; set --tier-key-file (docs/deploy.md)")
	}
	if keys != nil {
		logger.Info("tier records are signed and checked", "keys", keys.Len(), "signing_key_id", fmt.Sprintf("%08x", keys.SigningID()))
	}
	return nil
}
