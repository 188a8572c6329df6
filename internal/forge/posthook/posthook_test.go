package posthook

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestScriptQuotes(t *testing.T) {
	s := Script(Hook{Drover: "/opt/it's/drover", URL: "http://h:1/", Project: "g/p", RepoURL: "/srv/$HOME/x.git"})
	for _, want := range []string{"#!/bin/sh\n" + Marker, `exec '/opt/it'\''s/drover' hook announce --url 'http://h:1/' --project 'g/p' --repo-url '/srv/$HOME/x.git' --secret-file "$(dirname "$0")/drover-webhook-secret"`} {
		if !strings.Contains(s, want) {
			t.Errorf("Script = %s\nwant it to contain %s", s, want)
		}
	}
	// The quoting survives sh: the script's words are what was given.
	dir := t.TempDir()
	fake := filepath.Join(dir, "it's")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(dir, "post-receive")
	if err := os.WriteFile(hook, []byte(Script(Hook{Drover: fake, URL: "u", Project: "p q", RepoURL: "$(touch pwned)"})), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(hook).CombinedOutput()
	if err != nil {
		t.Fatalf("run the hook: %v\n%s", err, out)
	}
	want := "[hook]\n[announce]\n[--url]\n[u]\n[--project]\n[p q]\n[--repo-url]\n[$(touch pwned)]\n[--secret-file]\n[" + dir + "/drover-webhook-secret]\n"
	if string(out) != want {
		t.Errorf("the hook ran %q, want %q", out, want)
	}
}

func TestParseUpdates(t *testing.T) {
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	for _, tc := range []struct {
		in, want, err string
	}{
		{a + " " + b + " refs/heads/main\n" + strings.Repeat("0", 40) + " " + a + " refs/tags/v1\n\n", "[{" + a + " " + b + " refs/heads/main} {" + strings.Repeat("0", 40) + " " + a + " refs/tags/v1}]", ""},
		{"", "[]", ""},
		{a + " " + b, "", "line 1"},
		{a + " xyz refs/heads/main", "", "line 1"},
		{a + " " + b + " main", "", "line 1"},
		{a + " " + b + " refs/heads/x\n" + a + " " + strings.ToUpper(b) + " refs/heads/y", "", "line 2"},
	} {
		got, err := ParseUpdates(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseUpdates(%q) = %v, %v; want an error at %s", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || fmtUpdates(got) != tc.want {
			t.Errorf("ParseUpdates(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func fmtUpdates(us []Update) string {
	var parts []string
	for _, u := range us {
		parts = append(parts, "{"+u.Old+" "+u.New+" "+u.Ref+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	if err := exec.Command("git", "init", "-q", "--bare", dir).Run(); err != nil {
		t.Fatal(err)
	}
	h := Hook{Drover: "/usr/bin/drover", URL: "http://c", Project: "g/p"}
	if _, err := Install(dir, h, "", false); err == nil {
		t.Error("Install with no secret: no error")
	}
	if _, err := Install(t.TempDir(), h, "s", false); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("Install into a plain directory = %v", err)
	}
	path, err := Install(dir, h, "secret", false)
	if err != nil {
		t.Fatal(err)
	}
	// Again: drover's own hook is replaced.
	if _, err := Install(dir, h, "secret2", false); err != nil {
		t.Errorf("Install over drover's hook = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "hooks", SecretFile)); string(b) != "secret2\n" {
		t.Errorf("secret file = %q", b)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(dir, h, "s", false); !errors.Is(err, ErrForeignHook) {
		t.Errorf("Install over a foreign hook = %v, want ErrForeignHook", err)
	}
	if _, err := Install(dir, h, "s", true); err != nil {
		t.Errorf("Install --force = %v", err)
	}
}
