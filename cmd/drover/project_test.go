package main

import (
	"strings"
	"testing"
)

// TestProjectAndScheduleCommands drives a real coordinator with drover
// project and drover schedule.
func TestProjectAndScheduleCommands(t *testing.T) {
	url, admin, _ := adminServer(t)
	api := []string{"--url", url, "--token", admin}
	run := func(want int, args ...string) string {
		t.Helper()
		stdout, stderr, code, err := droverSplit(t, append(args, api...)...)
		if code != want {
			t.Fatalf("drover %s: exit %d (%v), want %d\n%s%s", strings.Join(args, " "), code, err, want, stdout, stderr)
		}
		return stdout
	}
	out := run(0, "project", "add", "g/app", "--repo", "https://example.com/app.git", "--variable", "TOKEN:masked,protected=long-secret-value",
		"--variable", "PLAIN=x", "--forge", "github", "--forge-repo", "o/app", "--forge-token", "ghp_x")
	if !strings.Contains(out, "project g/app") || !strings.Contains(out, "webhook secret: ") {
		t.Fatalf("project add: %s", out)
	}
	secret := strings.TrimSpace(out[strings.Index(out, "webhook secret: ")+len("webhook secret: "):])
	if got := strings.TrimSpace(run(0, "project", "show", "g/app", "--secret")); got != secret {
		t.Errorf("project show --secret = %q, want %q", got, secret)
	}
	out = run(0, "project", "show", "g/app")
	for _, want := range []string{"default branch: main", "github https://api.github.com, repository o/app, token set", "TOKEN (masked, protected)", "PLAIN"} {
		if !strings.Contains(out, want) {
			t.Errorf("project show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "long-secret-value") || strings.Contains(out, "ghp_x") || strings.Contains(out, secret) {
		t.Errorf("project show shows a secret:\n%s", out)
	}
	run(0, "project", "edit", "g/app", "--default-branch", "trunk")
	run(2, "project", "edit", "g/app")
	run(1, "project", "add", "g/app")
	run(2, "project", "add", "g/bad", "--variable", "K:secret=v")
	run(0, "project", "variable", "set", "g/app", "FILEVAR", "content", "--file")
	run(0, "project", "variable", "unset", "g/app", "PLAIN")
	out = run(0, "project", "variable", "list", "g/app")
	if !strings.Contains(out, "FILEVAR") || strings.Contains(out, "PLAIN") || !strings.Contains(out, "TOKEN") {
		t.Errorf("project variable list:\n%s", out)
	}
	if out = run(0, "project", "list"); !strings.Contains(out, "g/app") || !strings.Contains(out, "trunk") {
		t.Errorf("project list:\n%s", out)
	}

	out = run(0, "schedule", "add", "g/app", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--description", "nightly", "--variable", "NIGHTLY=1")
	if !strings.Contains(out, "schedule 1 of g/app") || !strings.Contains(out, "on trunk") {
		t.Fatalf("schedule add: %s", out)
	}
	run(2, "schedule", "add", "g/app")
	run(1, "schedule", "add", "g/app", "--cron", "0 3 * * *", "--timezone", "Mars/Olympus")
	if out = run(0, "schedule", "edit", "g/app", "1", "--active=false"); !strings.Contains(out, "never (inactive)") {
		t.Errorf("schedule edit --active=false: %s", out)
	}
	if out = run(0, "schedule", "list", "g/app"); !strings.Contains(out, "nightly") || !strings.Contains(out, "Europe/Berlin") {
		t.Errorf("schedule list:\n%s", out)
	}
	run(0, "schedule", "delete", "g/app", "1")
	run(1, "schedule", "delete", "g/app", "1")
	run(0, "project", "delete", "g/app")
	run(1, "project", "show", "g/app", "--secret")
}

// TestProjectTokenCommands: drover project token add, list and revoke
// against a real coordinator; the token works with the CLI until it is
// revoked.
func TestProjectTokenCommands(t *testing.T) {
	url, admin, _ := adminServer(t)
	run := func(want int, token string, args ...string) string {
		t.Helper()
		stdout, stderr, code, err := droverSplit(t, append(args, "--url", url, "--token", token)...)
		if code != want {
			t.Fatalf("drover %s: exit %d (%v), want %d\n%s%s", strings.Join(args, " "), code, err, want, stdout, stderr)
		}
		return stdout
	}
	run(0, admin, "project", "add", "g/app", "--repo", "https://example.com/app.git")
	out := run(0, admin, "project", "token", "add", "g/app", "ci bot", "--role", "maintainer", "--expires", "720h")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "token 1 of g/app (ci bot, maintainer), expires ") || !strings.HasPrefix(lines[1], "drp_") {
		t.Fatalf("project token add:\n%s", out)
	}
	tok := lines[1]
	run(2, admin, "project", "token", "add", "g/app", "x", "--role", "owner")
	run(2, admin, "project", "token", "add", "g/app", "x", "--expires", "someday")
	run(1, admin, "project", "token", "add", "g/none", "x")

	// The token reads its project's pipelines, and nothing of the admin's.
	run(0, tok, "pipeline", "list")
	run(1, tok, "project", "list")
	out = run(0, admin, "project", "token", "list", "g/app")
	if !strings.Contains(out, "ci bot") || !strings.Contains(out, "maintainer") || strings.Contains(out, "drp_") {
		t.Errorf("project token list:\n%s", out)
	}
	run(0, admin, "project", "token", "revoke", "g/app", "1")
	run(1, admin, "project", "token", "revoke", "g/app", "1")
	run(2, admin, "project", "token", "revoke", "g/app", "one")
	run(1, tok, "pipeline", "list")
	if out = run(0, admin, "project", "token", "list", "g/app"); strings.Contains(out, "ci bot") {
		t.Errorf("project token list after revoke:\n%s", out)
	}
}
