package fleetingdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/fleet/fleetingdir"
)

func TestFleetingParseRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		plugin  string
		want    fleetingdir.Ref
		wantErr string // part of the error; "" for none
	}{
		{plugin: "aws", want: fleetingdir.Ref{Repository: "registry.gitlab.com/gitlab-org/fleeting/plugins/aws", Constraint: "latest"}},
		{plugin: "aws:latest", want: fleetingdir.Ref{Repository: "registry.gitlab.com/gitlab-org/fleeting/plugins/aws", Constraint: "latest"}},
		{plugin: "googlecloud:1", want: fleetingdir.Ref{Repository: "registry.gitlab.com/gitlab-org/fleeting/plugins/googlecloud", Constraint: "1"}},
		{plugin: "my-group/my-plugin:1.2", want: fleetingdir.Ref{Repository: "registry.gitlab.com/my-group/my-plugin", Constraint: "1.2"}},
		{plugin: "a/b/c:1.2.3-rc.1", want: fleetingdir.Ref{Repository: "registry.gitlab.com/a/b/c", Constraint: "1.2.3-rc.1"}},
		{plugin: "registry.example.com/p/x:1.2.3", want: fleetingdir.Ref{Repository: "registry.example.com/p/x", Constraint: "1.2.3"}},
		{plugin: "127.0.0.1:5000/ns/myplugin:1", want: fleetingdir.Ref{Repository: "127.0.0.1:5000/ns/myplugin", Constraint: "1"}},
		{plugin: "localhost:5000/ns/myplugin", want: fleetingdir.Ref{Repository: "localhost:5000/ns/myplugin", Constraint: "latest"}},
		{plugin: "localhost/myplugin:2", want: fleetingdir.Ref{Repository: "localhost/myplugin", Constraint: "2"}},
		{plugin: "", wantErr: "empty"},
		{plugin: "aws:stable", wantErr: `tag "stable" is not a version constraint`},
		{plugin: "aws:1.2.3+build", wantErr: "aws:1.2.3+build"},
		{plugin: "aws@sha256:" + strings.Repeat("a", 64), wantErr: "digest"},
		{plugin: "AWS", wantErr: "AWS"},
		{plugin: "./bin/plugin", wantErr: "not an OCI reference"},
		{plugin: "/usr/local/bin/fleeting-plugin-aws", wantErr: "not an OCI reference"},
		{plugin: "../plugin", wantErr: "not an OCI reference"},
	}
	for _, tt := range tests {
		t.Run(tt.plugin, func(t *testing.T) {
			t.Parallel()
			got, err := fleetingdir.ParseRef(tt.plugin)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRef(%q) = %v, %v; want an error containing %q", tt.plugin, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRef(%q) = %v", tt.plugin, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseRef(%q) (-want +got):\n%s", tt.plugin, diff)
			}
		})
	}
}

func TestFleetingParseRefPath(t *testing.T) {
	t.Parallel()
	_, err := fleetingdir.ParseRef("./plugin")
	if !errors.Is(err, fleetingdir.ErrNotReference) {
		t.Errorf("ParseRef(./plugin) = %v, want ErrNotReference", err)
	}
}

// Not parallel: the working directory and $PATH are the process's.
func TestFleetingLocalPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	mustWrite(t, filepath.Join(dir, "bin", "plugin"), "#!/bin/sh\n", 0o755)
	mustWrite(t, filepath.Join(dir, "aws"), "a file named like a plugin\n", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "ns", "name"), 0o755); err != nil {
		t.Fatal(err)
	}
	pathDir := filepath.Join(dir, "path")
	mustWrite(t, filepath.Join(pathDir, "fleeting-plugin-handmade"), "#!/bin/sh\n", 0o755)
	t.Setenv("PATH", pathDir)

	tests := []struct {
		plugin string
		want   string // "" for not local
	}{
		{"./bin/plugin", filepath.Join(dir, "bin", "plugin")},
		{"./missing", filepath.Join(dir, "missing")},
		{"../x/plugin", filepath.Join(filepath.Dir(dir), "x", "plugin")},
		{"/opt/plugin", "/opt/plugin"},
		{"bin/plugin", filepath.Join(dir, "bin", "plugin")},
		{"bin/missing", ""}, // a registry.gitlab.com reference
		{"ns/name", ""},     // a directory is no program
		{"aws", ""},         // GitLab would take the file; drover does not
		{"fleeting-plugin-handmade", filepath.Join(pathDir, "fleeting-plugin-handmade")},
		{"fleeting-plugin-elsewhere", ""},
		{"fleeting-plugin-handmade:1", ""},
	}
	for _, tt := range tests {
		got, ok := fleetingdir.LocalPath(tt.plugin)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("LocalPath(%q) = %q, %v; want %q, %v", tt.plugin, got, ok, tt.want, tt.want != "")
		}
	}
}

// Not parallel: it sets environment variables.
func TestFleetingRoot(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "xdg")) // GitLab ignores it
	t.Setenv("FLEETING_PLUGIN_PATH", "")
	if got, want := fleetingdir.Root(), filepath.Join(home, ".config", "fleeting", "plugins"); got != want {
		t.Errorf("Root() = %q, want %q", got, want)
	}
	t.Setenv("FLEETING_PLUGIN_PATH", "/srv/plugins")
	if got := fleetingdir.Root(); got != "/srv/plugins" {
		t.Errorf("Root() with FLEETING_PLUGIN_PATH = %q, want /srv/plugins", got)
	}
}

const testRepo = "127.0.0.1:5000/ns/myplugin"

// installVersions lays out versions of repo under root as an installer
// leaves them.
func installVersions(t *testing.T, root, repo string, versions ...string) {
	t.Helper()
	for _, v := range versions {
		mustWrite(t, filepath.Join(root, filepath.FromSlash(repo), v, "plugin"), "#!/bin/sh\necho "+v+"\n", 0o755)
	}
}

func TestFleetingFind(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	installVersions(t, root, testRepo, "1.2.3", "1.3.0", "2.0.0", "2.1.0-rc.1")
	repoDir := filepath.Join(root, filepath.FromSlash(testRepo))
	// Not versions, or no program: passed over.
	mustWrite(t, filepath.Join(repoDir, "3.0.0", "README"), "no plugin here\n", 0o644)
	mustWrite(t, filepath.Join(repoDir, ".install-123", "plugin"), "half-written\n", 0o755)
	mustWrite(t, filepath.Join(repoDir, "notes.txt"), "\n", 0o644)

	tests := []struct {
		constraint string
		want       string // version; "" for not installed
	}{
		{"latest", "2.0.0"},
		{"1", "1.3.0"},
		{"1.2", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"1.3", "1.3.0"},
		{"2", "2.0.0"},
		{"2.1.0-rc.1", "2.1.0-rc.1"},
		{"1.2.4", ""},
		{"3", ""},
	}
	for _, tt := range tests {
		t.Run(tt.constraint, func(t *testing.T) {
			t.Parallel()
			ref := fleetingdir.Ref{Repository: testRepo, Constraint: tt.constraint}
			path, ver, err := fleetingdir.Find(root, ref)
			if tt.want == "" {
				var nie *fleetingdir.NotInstalledError
				if !errors.As(err, &nie) || !errors.Is(err, fleetingdir.ErrNotInstalled) {
					t.Fatalf("Find(%s) = %q, %q, %v; want a NotInstalledError", ref, path, ver, err)
				}
				for _, part := range []string{repoDir, "1.2.3, 1.3.0, 2.0.0, 2.1.0-rc.1", `"` + tt.constraint + `"`} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("Find(%s) error %q does not name %q", ref, err, part)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Find(%s) = %v", ref, err)
			}
			if wantPath := filepath.Join(repoDir, tt.want, "plugin"); path != wantPath || ver != tt.want {
				t.Errorf("Find(%s) = %q, %q; want %q, %q", ref, path, ver, wantPath, tt.want)
			}
		})
	}
}

func TestFleetingFindMissingPlugin(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ref, err := fleetingdir.ParseRef("aws:1")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = fleetingdir.Find(root, ref)
	want := "fleeting plugin registry.gitlab.com/gitlab-org/fleeting/plugins/aws is not installed: no version matching \"1\" in " +
		filepath.Join(root, "registry.gitlab.com", "gitlab-org", "fleeting", "plugins", "aws") + " (installed: none)"
	if err == nil || err.Error() != want {
		t.Errorf("Find(%s) = %v\nwant %s", ref, err, want)
	}
}

func TestFleetingList(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	installVersions(t, root, testRepo, "2.0.0", "1.10.0", "1.9.0")
	installVersions(t, root, "registry.gitlab.com/gitlab-org/fleeting/plugins/aws", "1.0.0", "1.0.1-!r!c.1")
	mustWrite(t, filepath.Join(root, "temp", "x"), "\n", 0o644)         // GitLab's installer leaves it
	mustWrite(t, filepath.Join(root, "4168911", "plugin"), "\n", 0o755) // and its temporary directories
	mustWrite(t, filepath.Join(root, "example.com", "x", "1.0.0", "README"), "no plugin\n", 0o644)

	got, err := fleetingdir.List(root)
	if err != nil {
		t.Fatal(err)
	}
	at := func(repo, ver string) string {
		return filepath.Join(root, filepath.FromSlash(repo), ver, "plugin")
	}
	want := []fleetingdir.Installed{
		{Repository: testRepo, Version: "1.9.0", Path: at(testRepo, "1.9.0")},
		{Repository: testRepo, Version: "1.10.0", Path: at(testRepo, "1.10.0")},
		{Repository: testRepo, Version: "2.0.0", Path: at(testRepo, "2.0.0")},
		{Repository: "registry.gitlab.com/gitlab-org/fleeting/plugins/aws", Version: "1.0.0", Path: at("registry.gitlab.com/gitlab-org/fleeting/plugins/aws", "1.0.0")},
		{Repository: "registry.gitlab.com/gitlab-org/fleeting/plugins/aws", Version: "1.0.1-RC.1", Path: at("registry.gitlab.com/gitlab-org/fleeting/plugins/aws", "1.0.1-!r!c.1")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	if got, err := fleetingdir.List(filepath.Join(root, "missing")); err != nil || len(got) != 0 {
		t.Errorf("List(missing root) = %v, %v; want nothing, nil", got, err)
	}
}

func mustWrite(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}
