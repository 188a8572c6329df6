package config

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SystemIDFile is the name of the file, next to config.toml, that holds
// the runner manager's system ID.
const SystemIDFile = ".runner_system_id"

// machineIDFiles are read in order for the machine ID; tests replace them.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// LoadOrCreateSystemID returns the system ID stored in .runner_system_id in
// the directory of configPath. When the file is missing or blank, it
// creates one as GitLab Runner does: "s_" plus the first 12 hex digits of
// HMAC-SHA256 keyed with the machine ID over "gitlab-runner", or, without a
// machine ID, "r_" plus 12 random letters and digits. The file is written
// atomically with mode 0600.
func LoadOrCreateSystemID(configPath string) (string, error) {
	path := filepath.Join(filepath.Dir(configPath), SystemIDFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if id := strings.TrimSpace(string(data)); id != "" {
			return id, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("config: read system ID: %w", err)
	}
	id, err := newSystemID()
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, []byte(id), 0o600); err != nil {
		return "", fmt.Errorf("config: write system ID: %w", err)
	}
	return id, nil
}

func newSystemID() (string, error) {
	for _, f := range machineIDFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if mid := strings.TrimSpace(string(data)); mid != "" {
			mac := hmac.New(sha256.New, []byte(mid))
			mac.Write([]byte("gitlab-runner"))
			return "s_" + hex.EncodeToString(mac.Sum(nil))[:12], nil
		}
	}
	s, err := randomAlnum(12)
	if err != nil {
		return "", fmt.Errorf("config: generate system ID: %w", err)
	}
	return "r_" + s, nil
}

func randomAlnum(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			// Reject the top of the byte range so every letter is equally
			// likely.
			if int(b) < 256-256%len(alphabet) && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
