package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stockpot/internal/offload"
)

// tierSecurity: keys, password and CA land in the tiers' config; a remote tier without a key
// is warned about at start, and one with a key is not; bad files are errors that name the flag.
func TestTierSecurity(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("keys", strings.Repeat("ab", 32)+"\n"+strings.Repeat("cd", 32)+"\n")
	pwFile := write("pw", "s3cret\n")
	run := func(to offload.Config, keys []string, pw, ca string) (offload.Config, string, error) {
		var log bytes.Buffer
		err := tierSecurity(&to, keys, pw, ca, slog.New(slog.NewTextHandler(&log, nil)))
		return to, log.String(), err
	}
	remote := offload.Config{RemoteURL: "redis://redis:6379/0"}

	to, log, err := run(remote, nil, "", "")
	if err != nil || to.Keys != nil || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "--tier-key-file") {
		t.Fatalf("remote without a key: %v, log %q; want a warning", err, log)
	}
	to, log, err = run(remote, []string{keyFile}, pwFile, "")
	if err != nil || to.Keys.Len() != 2 || to.Remote.Password != "s3cret" || strings.Contains(log, "level=WARN") {
		t.Fatalf("remote with keys and a password: %v, %d keys, password %q, log %q", err, to.Keys.Len(), to.Remote.Password, log)
	}
	if _, log, err = run(offload.Config{DiskDir: dir}, nil, "", ""); err != nil || strings.Contains(log, "WARN") {
		t.Fatalf("disk only, no key: %v, log %q; want no warning", err, log)
	}
	for name, c := range map[string]struct {
		to               offload.Config
		keys             []string
		pw, ca, wantFlag string
	}{
		"bad key file":        {remote, []string{write("bad", "nope\n")}, "", "", "--tier-key-file"},
		"empty password":      {remote, nil, write("empty", "\n"), "", "--remote-cache-password-file"},
		"CA without PEM":      {remote, nil, "", write("ca", "not pem"), "--remote-cache-ca-file"},
		"password, no remote": {offload.Config{DiskDir: dir}, nil, pwFile, "", "need --remote-cache"},
	} {
		if _, _, err := run(c.to, c.keys, c.pw, c.ca); err == nil || !strings.Contains(err.Error(), c.wantFlag) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.wantFlag)
		}
	}
}
