package main

import (
	"strings"
	"testing"
)

// TestCoordinatorSecretKeyEnv: a DROVER_SECRET_KEY or DROVER_SECRET_KEY_OLD
// that is not a key stops the coordinator at start with exit code 2 and a
// message naming the variable, never quoting its value.
func TestCoordinatorSecretKeyEnv(t *testing.T) {
	const bad = "my-passphrase-is-not-a-key"
	for _, name := range []string{"DROVER_SECRET_KEY", "DROVER_SECRET_KEY_OLD"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			out, code, err := drover(t, "coordinator", "--listen", "127.0.0.1:0", "--data", t.TempDir())
			if code != 2 || err == nil || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("drover coordinator with a bad %s: exit %d, %v; want 2 and an error naming it\n%s", name, code, err, out)
			}
			if strings.Contains(err.Error(), bad) || strings.Contains(out, bad) {
				t.Errorf("the error quotes the variable's value: %v", err)
			}
		})
	}
}
