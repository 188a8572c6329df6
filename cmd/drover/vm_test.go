package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestVMImageBuild: drover vm image build prints the image's files and a
// config.toml runner whose qemu and ssh keys name them (the busybox image
// of this machine's cache: built here first when missing).
func TestVMImageBuild(t *testing.T) {
	for _, bin := range []string{"qemu-img", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: %v", bin, err)
		}
	}
	var stdout, stderr bytes.Buffer
	code, err := execute(&stdout, &stderr, "vm", "image", "build", "--port", "2299")
	if code != 0 {
		t.Fatalf("drover vm image build: exit %d, %v\n%s", code, err, stderr.String())
	}
	out := stdout.String()
	_, snippet, ok := strings.Cut(out, "A runner of the qemu executor (config.toml):\n\n")
	if !ok {
		t.Fatalf("no config.toml runner in the output:\n%s", out)
	}
	var cfg struct {
		Runners []struct {
			Executor string
			Shell    string
			Qemu     struct {
				BaseName string `toml:"base_name"`
				Kernel   string
				Initrd   string
				Append   string
			}
			SSH struct {
				User         string
				IdentityFile string `toml:"identity_file"`
			} `toml:"ssh"`
		}
	}
	if _, err := toml.Decode(snippet, &cfg); err != nil {
		t.Fatalf("the runner is not TOML: %v\n%s", err, snippet)
	}
	if len(cfg.Runners) != 1 {
		t.Fatalf("%d runners in the snippet, want 1", len(cfg.Runners))
	}
	r := cfg.Runners[0]
	if r.Executor != "qemu" || r.Shell != "sh" || r.SSH.User != "root" || !strings.Contains(r.Qemu.Append, "root=/dev/vda") {
		t.Errorf("runner = %+v, want executor qemu, shell sh, user root, an append with root=/dev/vda", r)
	}
	for key, path := range map[string]string{"base_name": r.Qemu.BaseName, "kernel": r.Qemu.Kernel, "initrd": r.Qemu.Initrd, "identity_file": r.SSH.IdentityFile} {
		if _, err := os.Stat(path); err != nil || !strings.Contains(out, "  "+path) {
			t.Errorf("%s = %q: %v; want an existing file, listed above the runner too", key, path, err)
		}
	}
	for _, want := range []string{"qemu-img create -f qcow2 -b " + r.Qemu.BaseName, "hostfwd=tcp:127.0.0.1:2299-:22", "ssh -i " + r.SSH.IdentityFile + " -p 2299"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}

	var quiet bytes.Buffer
	if code, err := execute(&quiet, &stderr, "vm", "image", "build", "-q"); code != 0 || quiet.String() != filepath.Dir(r.Qemu.BaseName)+"\n" {
		t.Errorf("drover vm image build -q = %q, exit %d, %v; want the image's directory %s", quiet.String(), code, err, filepath.Dir(r.Qemu.BaseName))
	}
}

func TestVMImageBuildUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "alpine"}, `--kind "alpine": want busybox or debian`},
		{[]string{"--port", "0"}, "--port 0: want 1 to 65535"},
		{[]string{"--log-level", "loud"}, `log level "loud"`},
		{[]string{"extra"}, "unknown command"},
	} {
		var stdout, stderr bytes.Buffer
		code, err := execute(&stdout, &stderr, append([]string{"vm", "image", "build"}, tc.args...)...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("drover vm image build %v: exit %d, %v; want 2 and an error with %q", tc.args, code, err, tc.want)
		}
	}
}
