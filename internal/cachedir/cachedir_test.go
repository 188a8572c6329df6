package cachedir

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestDirFromEnv(t *testing.T) {
	t.Setenv(Env, "/srv/drover-cache")
	if got, err := Dir(); err != nil || got != "/srv/drover-cache" {
		t.Fatalf("Dir() = %q, %v; want /srv/drover-cache", got, err)
	}
}

func TestDirUnderHome(t *testing.T) {
	t.Setenv(Env, "")
	t.Setenv("HOME", "/home/someone")
	if got, err := Dir(); err != nil || got != filepath.Join("/home/someone", ".cache", "drover") {
		t.Fatalf("Dir() = %q, %v; want /home/someone/.cache/drover", got, err)
	}
}

// TestDirNoHome: without the variable and a home, the error says to set
// the variable.
func TestDirNoHome(t *testing.T) {
	t.Setenv(Env, "")
	t.Setenv("HOME", "")
	if got, err := Dir(); err == nil || !strings.Contains(err.Error(), "set "+Env) {
		t.Fatalf("Dir() = %q, %v; want an error saying to set %s", got, err, Env)
	}
}
