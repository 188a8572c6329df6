package guestimage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drover-ci/drover/internal/vm/guestimage"
)

// builderEnv makes the test binary a builder process (see TestMain): it
// builds the busybox image in the cache directory the variable names,
// logs (text) to stderr and prints the image's directory and host key.
const builderEnv = "GUESTIMAGE_TEST_BUILDER"

func TestMain(m *testing.M) {
	if cache := os.Getenv(builderEnv); cache != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		img, err := guestimage.Build(context.Background(), guestimage.Options{CacheDir: cache, Logger: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%s\n%s", img.Dir, bytes.TrimSpace(mustRead(img.HostKeyFile)))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func mustRead(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return b
}

// builder is a builder process.
type builder struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *lines
}

// startBuilder starts a builder process on cache.
func startBuilder(t *testing.T, cache string) *builder {
	t.Helper()
	needTools(t)
	b := &builder{stderr: &lines{seen: map[string]chan struct{}{}}}
	b.cmd = exec.Command(os.Args[0], "-test.run=^$")
	b.cmd.Env = append(os.Environ(), builderEnv+"="+cache)
	b.cmd.Stdout = &b.stdout
	b.cmd.Stderr = b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return b
}

// lines is a builder's stderr: logged, kept, and watched for messages.
type lines struct {
	mu   sync.Mutex
	all  []string
	part string
	seen map[string]chan struct{} // closed when a line has the message
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part += string(p)
	for {
		line, rest, ok := strings.Cut(l.part, "\n")
		if !ok {
			break
		}
		l.part = rest
		l.all = append(l.all, line)
		for msg, ch := range l.seen {
			if strings.Contains(line, msg) {
				close(ch)
				delete(l.seen, msg)
			}
		}
	}
	return len(p), nil
}

// on returns a channel closed when a line with msg has been written.
func (l *lines) on(msg string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	for _, line := range l.all {
		if strings.Contains(line, msg) {
			close(ch)
			return ch
		}
	}
	l.seen[msg] = ch
	return ch
}

func (l *lines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.all {
		if strings.Contains(line, msg) {
			n++
		}
	}
	return n
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

func needTools(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"qemu-img", "apt-get", "dpkg-deb", "busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: %v", bin, err)
		}
	}
}

// TestBuildConcurrentProcesses: two processes building the same image in
// the same empty cache at once both get it, built once (the second waits
// on the lock and takes the first's), and no work directory is left.
func TestBuildConcurrentProcesses(t *testing.T) {
	cache := t.TempDir()
	a, b := startBuilder(t, cache), startBuilder(t, cache)
	for _, p := range []*builder{a, b} {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("builder: %v\n%s", err, p.stderr)
		}
	}
	if a.stdout.String() != b.stdout.String() {
		t.Errorf("the builders got different images:\n%s\n---\n%s", a.stdout.String(), b.stdout.String())
	}
	if n := a.stderr.count("building the guest image") + b.stderr.count("building the guest image"); n != 1 {
		t.Errorf("%d builders built the image, want 1:\n%s\n---\n%s", n, a.stderr, b.stderr)
	}
	if n := a.stderr.count("built by another process") + b.stderr.count("built by another process"); n != 1 {
		t.Errorf("%d builders took the other's image, want 1", n)
	}
	dir, _, _ := strings.Cut(a.stdout.String(), "\n")
	img, err := guestimage.Load(dir)
	if err != nil {
		t.Fatalf("Load(%s) = %v", dir, err)
	}
	if !strings.Contains(b.stdout.String(), strings.TrimSpace(string(mustRead(img.HostKeyFile)))) {
		t.Errorf("Load's host key differs from the builders'")
	}
	assertNoWork(t, cache)
}

// TestBuildCrashMidway: a builder killed in the middle of a build leaves
// no image, only its work directory; the next Build makes the image and
// removes that directory. A cancelled Build leaves nothing.
func TestBuildCrashMidway(t *testing.T) {
	cache := t.TempDir()
	p := startBuilder(t, cache)
	<-p.stderr.on("making the initramfs")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	name := guestimage.Name(guestimage.Options{})
	if _, err := guestimage.Load(filepath.Join(cache, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the crash, Load = %v, want fs.ErrNotExist", err)
	}
	if work, _ := filepath.Glob(filepath.Join(cache, ".build-*")); len(work) != 1 {
		t.Fatalf("after the crash, work directories %v, want the dead builder's", work)
	}

	// A cancelled build cleans up after itself.
	var logs lines
	logs.seen = map[string]chan struct{}{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		<-logs.on("making the initramfs")
		cancel()
	}()
	_, err := guestimage.Build(ctx, guestimage.Options{CacheDir: cache, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("Build with ctx cancelled midway = nil error")
	}
	if n := logs.count("removing an interrupted build"); n != 1 {
		t.Errorf("the cancelled Build removed %d interrupted builds, want 1:\n%s", n, logs.String())
	}
	assertNoWork(t, cache)
	if _, err := guestimage.Load(filepath.Join(cache, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the cancelled Build, Load = %v, want fs.ErrNotExist", err)
	}

	img, err := guestimage.Build(t.Context(), guestimage.Options{CacheDir: cache})
	if err != nil {
		t.Fatalf("Build after the crash = %v", err)
	}
	if img.Dir != filepath.Join(cache, name) {
		t.Errorf("Build: Dir = %s, want %s", img.Dir, filepath.Join(cache, name))
	}
	assertNoWork(t, cache)

	// Cached: a second Build does no work and logs nothing.
	var again bytes.Buffer
	img2, err := guestimage.Build(t.Context(), guestimage.Options{CacheDir: cache, Logger: slog.New(slog.NewTextHandler(&again, nil))})
	if err != nil || img2.Dir != img.Dir || again.Len() != 0 {
		t.Errorf("second Build = %s, %v, logging %q; want %s, nil, nothing", img2.Dir, err, again.String(), img.Dir)
	}
}

func assertNoWork(t *testing.T, cache string) {
	t.Helper()
	if work, _ := filepath.Glob(filepath.Join(cache, ".build-*")); len(work) != 0 {
		t.Errorf("work directories left in the cache: %v", work)
	}
}
