package systemdtest

import (
	"strings"
	"testing"
)

// TestStartBootsSystemd: the container's PID 1 is systemd, the system is
// running, and the helpers move files and exit codes in and out.
func TestStartBootsSystemd(t *testing.T) {
	c := Start(t)
	ctx := t.Context()
	out, _, err := c.Exec(ctx, "cat", "/proc/1/comm")
	if err != nil || strings.TrimSpace(out) != "systemd" {
		t.Fatalf("PID 1 = %q (%v), want systemd", out, err)
	}
	if err := c.WriteFile(ctx, "/tmp/x", []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadFile(ctx, "/tmp/x")
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("ReadFile(/tmp/x) = %q, %v; want hello", got, err)
	}
	_, _, err = c.Exec(ctx, "sh", "-c", "echo oops >&2; exit 3")
	if ExitCode(err) != 3 || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("Exec(exit 3) = %v, want exit code 3 with its stderr", err)
	}
	if _, _, err := c.Exec(ctx, "test", "-d", "/run/systemd/system"); err != nil {
		t.Fatalf("/run/systemd/system: %v", err)
	}
}
