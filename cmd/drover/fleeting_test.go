package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet/fleetingdir/fleetingdirtest"
)

// fleetingRegistry starts a registry holding ns/myplugin at versions,
// with a build for this host that prints "<version>".
func fleetingRegistry(ctx context.Context, t *testing.T, o fleetingdirtest.Options, versions ...string) *fleetingdirtest.Registry {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the test plugins are shell scripts for linux")
	}
	reg := fleetingdirtest.Start(ctx, t, o)
	for _, v := range versions {
		publishFleetingPlugin(ctx, t, reg, "ns/myplugin", v)
	}
	return reg
}

func publishFleetingPlugin(ctx context.Context, t *testing.T, reg *fleetingdirtest.Registry, repo, v string) {
	t.Helper()
	err := reg.Publish(ctx, repo, v,
		fleetingdirtest.Plugin{OS: "linux", Arch: "amd64", Binary: fleetingdirtest.Script(v)},
		fleetingdirtest.Plugin{OS: "linux", Arch: "arm64", Binary: fleetingdirtest.Script(v)},
	)
	if err != nil {
		t.Fatalf("Publish(%s, %s) = %v", repo, v, err)
	}
}

func fleetingContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fleetingConfig writes a config.toml with one runner per plugin value
// ("" for a runner without [runners.autoscaler]).
func fleetingConfig(t *testing.T, runners ...[2]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("concurrent = 4\n")
	for i, r := range runners {
		fmt.Fprintf(&b, "\n[[runners]]\nname = %q\nurl = \"http://127.0.0.1:1\"\ntoken = \"glrt-%d\"\nexecutor = \"instance\"\n", r[0], i)
		if r[1] != "" {
			fmt.Fprintf(&b, "[runners.autoscaler]\nplugin = %q\ncapacity_per_instance = 1\nmax_instances = 2\n", r[1])
		}
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantLines checks that out has each of want as a whole line.
func wantLines(t *testing.T, cmd, out string, want ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("%s: no line\n\t%s\nin:\n%s", cmd, w, out)
		}
	}
}

// Not parallel: it sets FLEETING_PLUGIN_PATH.
func TestFleetingInstallAndList(t *testing.T) {
	ctx := fleetingContext(t)
	reg := fleetingRegistry(ctx, t, fleetingdirtest.Options{}, "1.2.3", "1.3.0", "2.0.0")
	root := t.TempDir()
	t.Setenv("FLEETING_PLUGIN_PATH", root)
	local := filepath.Join(t.TempDir(), "my-plugin")
	if err := os.WriteFile(local, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref := reg.Host + "/ns/myplugin"
	cfg := fleetingConfig(t,
		[2]string{"one", ref + ":1"},
		[2]string{"one again", ref + ":1"},
		[2]string{"one-two", ref + ":1.2"},
		[2]string{"dock", "docker"},
		[2]string{"simulated", "sim"},
		[2]string{"local", local},
		[2]string{"plain", ""},
	)
	dir := filepath.Join(root, reg.Host, "ns", "myplugin")
	at := func(v string) string { return filepath.Join(dir, v, "plugin") }

	out, code, err := drover(t, "fleeting", "install", "--config", cfg)
	if code != 0 {
		t.Fatalf("fleeting install: code %d, %v\n%s", code, err, out)
	}
	wantLines(t, "fleeting install", out,
		"Installing the fleeting plugins of "+cfg+" into "+root,
		`runner "one": `+ref+`:1: installed `+ref+` version 1.3.0 at `+at("1.3.0"),
		`runner "one again": `+ref+`:1: installed `+ref+` version 1.3.0 at `+at("1.3.0"),
		`runner "one-two": `+ref+`:1.2: installed `+ref+` version 1.2.3 at `+at("1.2.3"),
		`runner "dock": docker: skipped: built-in provider`,
		`runner "simulated": sim: skipped: built-in provider`,
		`runner "local": `+local+`: skipped: a program on disk (`+local+`)`,
	)
	if strings.Contains(out, `"plain"`) {
		t.Errorf("fleeting install mentions the runner without an autoscaler:\n%s", out)
	}
	if got, err := fleetingdirtest.Output(at("1.3.0")); err != nil || string(got) != "1.3.0\n" {
		t.Errorf("the installed plugin printed %q, %v", got, err)
	}

	// Again: nothing to do, and the registry is not asked.
	manifestsBefore := reg.Count("GET", "/manifests/")
	out, code, err = drover(t, "fleeting", "install", "--config", cfg)
	if code != 0 {
		t.Fatalf("second fleeting install: code %d, %v\n%s", code, err, out)
	}
	wantLines(t, "second fleeting install", out,
		`runner "one": `+ref+`:1: already installed: `+ref+` version 1.3.0 at `+at("1.3.0"),
		`runner "one-two": `+ref+`:1.2: already installed: `+ref+` version 1.2.3 at `+at("1.2.3"),
	)
	if n := reg.Count("GET", "/manifests/"); n != manifestsBefore {
		t.Errorf("the second install fetched %d manifests, want none", n-manifestsBefore)
	}

	// A new release: --upgrade takes it where the constraint allows.
	publishFleetingPlugin(ctx, t, reg, "ns/myplugin", "1.4.0")
	out, code, err = drover(t, "fleeting", "install", "--upgrade", "--config", cfg)
	if code != 0 {
		t.Fatalf("fleeting install --upgrade: code %d, %v\n%s", code, err, out)
	}
	wantLines(t, "fleeting install --upgrade", out,
		`runner "one": `+ref+`:1: installed `+ref+` version 1.4.0 at `+at("1.4.0"),
		`runner "one-two": `+ref+`:1.2: already installed: `+ref+` version 1.2.3 at `+at("1.2.3")+` (the newest matching "1.2")`,
	)

	out, code, err = drover(t, "fleeting", "list", "--config", cfg)
	if code != 0 {
		t.Fatalf("fleeting list: code %d, %v\n%s", code, err, out)
	}
	wantLines(t, "fleeting list", out,
		"Fleeting plugins of "+cfg,
		`  runner "one": `+ref+`:1: `+ref+` version 1.4.0 at `+at("1.4.0"),
		`  runner "one-two": `+ref+`:1.2: `+ref+` version 1.2.3 at `+at("1.2.3"),
		`  runner "dock": docker: built-in provider`,
		`  runner "local": `+local+`: program on disk at `+local,
		"Installed in "+root,
		"  "+ref+" version 1.2.3 at "+at("1.2.3"),
		"  "+ref+" version 1.3.0 at "+at("1.3.0"),
		"  "+ref+" version 1.4.0 at "+at("1.4.0"),
	)
}

// Not parallel: it sets FLEETING_PLUGIN_PATH.
func TestFleetingInstallErrors(t *testing.T) {
	ctx := fleetingContext(t)
	reg := fleetingRegistry(ctx, t, fleetingdirtest.Options{}, "1.0.0")
	root := t.TempDir()
	t.Setenv("FLEETING_PLUGIN_PATH", root)
	ref := reg.Host + "/ns/myplugin"

	tests := []struct {
		name     string
		runners  [][2]string
		wantCode int
		wantErr  []string // parts of the error
		wantOut  []string // lines of the output
	}{
		{
			name:     "missing plugin",
			runners:  [][2]string{{"gone", reg.Host + "/ns/missing:1"}, {"fine", ref + ":1"}},
			wantCode: 1,
			wantErr:  []string{"config ", `runner "gone"`, reg.Host + "/ns/missing", "NAME_UNKNOWN"},
			wantOut:  []string{`runner "gone": ` + reg.Host + `/ns/missing:1: failed`, `runner "fine": ` + ref + `:1: installed ` + ref + ` version 1.0.0 at ` + filepath.Join(root, reg.Host, "ns", "myplugin", "1.0.0", "plugin")},
		},
		{
			name:     "no matching version",
			runners:  [][2]string{{"future", ref + ":3"}},
			wantCode: 1,
			wantErr:  []string{`runner "future"`, `no version of ` + ref + ` matches "3" (versions: 1.0.0)`},
		},
		{
			name:     "not a constraint",
			runners:  [][2]string{{"stable", "aws:stable"}},
			wantCode: 2,
			wantErr:  []string{`runner "stable"`, `tag "stable" is not a version constraint`},
		},
		{
			name:    "no plugins",
			runners: [][2]string{{"plain", ""}},
			wantOut: []string{"No runner of CONFIG has a [runners.autoscaler] plugin: nothing to install"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fleetingConfig(t, tt.runners...)
			out, code, err := drover(t, "fleeting", "install", "--config", cfg)
			if code != tt.wantCode {
				t.Fatalf("fleeting install: code %d, want %d; %v\n%s", code, tt.wantCode, err, out)
			}
			for _, part := range tt.wantErr {
				if !strings.Contains(err.Error(), strings.ReplaceAll(part, "config ", "config "+cfg)) {
					t.Errorf("fleeting install error %q does not contain %q", err, part)
				}
			}
			for i := range tt.wantOut {
				tt.wantOut[i] = strings.ReplaceAll(tt.wantOut[i], "CONFIG", cfg)
			}
			wantLines(t, "fleeting install", out, tt.wantOut...)
		})
	}

	out, code, err := drover(t, "fleeting", "install", "--config", filepath.Join(t.TempDir(), "none.toml"))
	if code == 0 || !strings.Contains(err.Error(), "none.toml") {
		t.Errorf("fleeting install with no config file: code %d, %v\n%s", code, err, out)
	}
}

// Not parallel: it sets FLEETING_PLUGIN_PATH and DOCKER_CONFIG.
func TestFleetingLogin(t *testing.T) {
	ctx := fleetingContext(t)
	reg := fleetingRegistry(ctx, t, fleetingdirtest.Options{Username: "deploy", Password: "s3cret"}, "1.0.0")
	t.Setenv("FLEETING_PLUGIN_PATH", t.TempDir())
	docker := t.TempDir()
	t.Setenv("DOCKER_CONFIG", docker)
	cfg := fleetingConfig(t, [2]string{"private", reg.Host + "/ns/myplugin"})

	out, code, err := drover(t, "fleeting", "install", "--config", cfg)
	if code != 1 || !strings.Contains(err.Error(), "no credentials are stored for "+reg.Host) || !strings.Contains(err.Error(), "drover fleeting login "+reg.Host) {
		t.Fatalf("fleeting install before login: code %d, %v; want an error saying to log in\n%s", code, err, out)
	}

	var stdout, stderr bytes.Buffer
	root := newRootCmd()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(strings.NewReader("s3cret\n"))
	root.SetArgs([]string{"fleeting", "login", "--username", "deploy", "--password-stdin", reg.Host})
	if err := root.Execute(); err != nil {
		t.Fatalf("fleeting login: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	wantLines(t, "fleeting login", stdout.String(), "Stored the credentials of deploy for "+reg.Host+" in "+filepath.Join(docker, "config.json"))

	out, code, err = drover(t, "fleeting", "install", "--config", cfg)
	if code != 0 || !strings.Contains(out, "installed "+reg.Host+"/ns/myplugin version 1.0.0") {
		t.Fatalf("fleeting install after login: code %d, %v\n%s", code, err, out)
	}
}

func TestFleetingUsage(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		want     []string
	}{
		{[]string{"fleeting", "--help"}, 0, []string{"drover fleeting install", "FLEETING_PLUGIN_PATH", "registry.gitlab.com/gitlab-org/fleeting/plugins/aws"}},
		{[]string{"fleeting", "install", "--help"}, 0, []string{"--upgrade", "--config", "$CONFIG_FILE"}},
		{[]string{"fleeting", "login", "--help"}, 0, []string{"--username", "--password-stdin", "registry.gitlab.com"}},
		{[]string{"fleeting", "login", "registry.example.com"}, 2, []string{"give --username"}},
		{[]string{"fleeting", "login", "-u", "x", "registry.example.com"}, 2, []string{"give --password or --password-stdin"}},
		{[]string{"fleeting", "install", "extra"}, 2, []string{"unknown command"}},
		{[]string{"fleeting", "nope"}, 2, []string{"unknown command"}},
	}
	for _, tt := range tests {
		out, code, err := drover(t, tt.args...)
		if err != nil {
			out += err.Error()
		}
		if code != tt.wantCode {
			t.Errorf("drover %s: code %d, want %d\n%s", strings.Join(tt.args, " "), code, tt.wantCode, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("drover %s: output lacks %q:\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
	}
}
