// Package cachedir is where drover keeps what it builds or downloads once
// per machine (Debian roots, VM images, test binaries, earlier releases):
// $DROVER_CACHE_DIR, else ~/.cache/drover. It is not the jobs' cache
// (internal/cache).
package cachedir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Env is the variable that names the cache directory.
const Env = "DROVER_CACHE_DIR"

// Dir returns drover's cache directory: $DROVER_CACHE_DIR, else
// ~/.cache/drover. It fails only when the variable is unset and there is
// no home directory.
func Dir() (string, error) {
	if d := os.Getenv(Env); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: set %s: %w", Env, err)
	}
	return filepath.Join(home, ".cache", "drover"), nil
}
