package instance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/sshx"
)

// helperBinary is the drover binary the executors of a provider install
// on their hosts for the cache and artifact stages: found and hashed
// once.
type helperBinary struct {
	path string // "" = this process's executable

	once sync.Once
	sum  string // first 12 hex digits of its SHA-256
	size int64
	err  error
}

func (h *helperBinary) load() (path, sum string, size int64, err error) {
	h.once.Do(func() {
		p := h.path
		if p == "" {
			if p, h.err = os.Executable(); h.err != nil {
				h.err = fmt.Errorf("find drover's own binary: %w", h.err)
				return
			}
		}
		f, err := os.Open(p)
		if err != nil {
			h.err = fmt.Errorf("drover's binary: %w", err)
			return
		}
		defer f.Close()
		d := sha256.New()
		if h.size, err = io.Copy(d, f); err != nil {
			h.err = fmt.Errorf("hash %s: %w", p, err)
			return
		}
		h.path, h.sum = p, hex.EncodeToString(d.Sum(nil))[:12]
	})
	return h.path, h.sum, h.size, h.err
}

// needsHelper reports whether the job has cache or artifact stages: only
// then is the helper installed.
func needsHelper(job *api.JobResponse) bool {
	return job != nil && (len(job.Cache) > 0 || len(job.Artifacts) > 0 || len(job.Dependencies) > 0)
}

// unameArch maps GOARCH to what `uname -m` prints for it.
var unameArch = map[string][]string{
	"amd64": {"x86_64", "amd64"},
	"arm64": {"aarch64", "arm64"},
	"386":   {"i386", "i486", "i586", "i686"},
	"arm":   {"armv6l", "armv7l", "armv7", "armv6"},
}

// runsOn reports whether a binary for this process's platform runs on a
// host whose `uname -sm` printed out.
func runsOn(out string) bool {
	f := strings.Fields(out)
	if len(f) != 2 || !strings.EqualFold(f[0], runtime.GOOS) {
		return false
	}
	for _, m := range unameArch[runtime.GOARCH] {
		if f[1] == m {
			return true
		}
	}
	return false
}

// installHelper makes sure the host has drover's binary at a path named
// by its hash below cacheDir, uploading it over the connection when it is
// missing (once per host and drover version), and returns its path
// there. It returns "" with a warning in the
// job log when the binary cannot run there (another OS or architecture)
// or cannot be installed: the cache and artifact stages are then skipped.
func (e *Executor) installHelper(ctx context.Context, client *sshx.Client, cacheDir string, trace io.Writer) string {
	warn := func(format string, args ...any) string {
		fmt.Fprintf(trace, "\033[0;33mWARNING: "+format+"; the cache and artifact stages are skipped\033[0;m\n", args...)
		return ""
	}
	if e.helperBin == nil {
		return warn("drover's helper binary is not known to this executor")
	}
	local, sum, size, err := e.helperBin.load()
	if err != nil {
		return warn("%v", err)
	}
	dir := cacheDir + "/.drover-helper"
	remote := dir + "/drover-" + sum
	out, err := client.Output(ctx, shCommand(fmt.Sprintf("if [ -x %s ]; then echo present; else uname -sm; fi", quote(remote))), nil)
	if err != nil {
		return warn("cannot look for drover's helper on the host: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s == "present" {
		return remote
	} else if !runsOn(s) {
		return warn("the host is %q, drover's binary is for %s/%s", s, runtime.GOOS, runtime.GOARCH)
	}
	fmt.Fprintf(trace, "Installing drover's helper on the host (%.1f MiB, once per drover version)...\n", float64(size)/(1<<20))
	f, err := os.Open(local)
	if err != nil {
		return warn("%v", err)
	}
	defer f.Close()
	// Written under a temporary name and renamed: a job that reads the
	// path finds the whole binary or none.
	script := fmt.Sprintf(`d=%s; t="$d/.drover-$$.tmp"
mkdir -p -- "$d" && cat > "$t" && chmod 755 "$t" && mv -f -- "$t" %s || { rm -f -- "$t"; exit 1; }`, quote(dir), quote(remote))
	if _, err := client.Output(ctx, shCommand(script), f); err != nil {
		return warn("cannot install drover's helper at %s: %v", remote, err)
	}
	return remote
}

// HelperCommand is how the job's cache and artifact stages call drover's
// helper on the host ("" when it is not installed there): see
// executor.HelperHost.
func (e *Executor) HelperCommand() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.helper
}
