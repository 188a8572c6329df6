package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
)

// walkPages are the pages whose ```sh blocks make the documentation's
// walk-through, in the order they run, relative to the repository's root:
// a block may use what the blocks before it, on its page or an earlier
// one, started or wrote (the coordinator of getting-started.md serves the
// pages after it). docs/README.md lists the same pages in the same order.
var walkPages = []string{
	"README.md",
	"docs/getting-started.md",
	"docs/pipelines.md",
	"docs/projects.md",
	"docs/web-ui.md",
	"docs/https-and-secrets.md",
	"docs/cache-and-artifacts.md",
	"docs/several-coordinators.md",
	"docs/docker.md",
	"docs/router.md",
	"docs/autoscaling.md",
}

// standalonePages are the pages whose ```sh blocks are not part of the
// walk-through, each with the reason. A page of docs/ with an ```sh block
// is in one of the two lists (TestReadmePages).
var standalonePages = map[string]string{
	"docs/BENCHMARKS.md":       "benchmark runs, minutes to hours each",
	"docs/SECURITY.md":         "go test runs of the probe suites, which the test suite runs itself",
	"docs/KUBERNETES-TESTS.md": "builds and starts the test cluster (15-25 minutes the first time)",
	"docs/vm.md":               "builds VM images and boots guests under QEMU",
	"docs/qemu.md":             "needs a VM image from scripts/vm-image.sh and a runner token",
	"docs/autoscaler.md":       "the simulator on the reader's own config.toml",
}

// readmeBlock is one fenced ```sh block of a Markdown page.
type readmeBlock struct {
	line int // of the opening fence
	text string
}

// readmeBlocks returns the ```sh blocks of the Markdown page at path, in
// order.
func readmeBlocks(file string) ([]readmeBlock, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks []readmeBlock
		cur    *readmeBlock
		inside bool // in any fence, sh or not
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case fence && !inside:
			inside = true
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```")) == "sh" {
				cur = &readmeBlock{line: n}
			}
		case fence && inside:
			inside = false
			if cur != nil {
				blocks = append(blocks, *cur)
				cur = nil
			}
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if inside {
		return nil, fmt.Errorf("%s: a fence is never closed", file)
	}
	return blocks, sc.Err()
}

// walkBlock is an ```sh block of the walk-through and the page it is on.
type walkBlock struct {
	page string // relative to the repository's root
	readmeBlock
}

// walkBlocks returns the ```sh blocks of walkPages under root, in the
// walk-through's order.
func walkBlocks(root string) ([]walkBlock, error) {
	var all []walkBlock
	for _, page := range walkPages {
		blocks, err := readmeBlocks(filepath.Join(root, page))
		if err != nil {
			return nil, err
		}
		if len(blocks) == 0 {
			return nil, fmt.Errorf("%s is a page of the walk-through but has no sh block", page)
		}
		for _, b := range blocks {
			all = append(all, walkBlock{page, b})
		}
	}
	return all, nil
}

// TestReadmePages checks the lists of pages against the documentation: a
// listed page exists and has ```sh blocks, every page of docs/ with one is
// in a list (no example escapes TestReadmeBlocks unsaid), the index lists
// the walk-through in walkPages' order, and the index links every page of
// docs/, so that each capability is two clicks from it.
func TestReadmePages(t *testing.T) {
	for _, page := range walkPages {
		if _, ok := standalonePages[page]; ok {
			t.Errorf("%s is in both walkPages and standalonePages", page)
		}
	}
	if _, err := walkBlocks(".."); err != nil {
		t.Error(err)
	}
	for page := range standalonePages {
		blocks, err := readmeBlocks(filepath.Join("..", page))
		if err != nil {
			t.Error(err)
		} else if len(blocks) == 0 {
			t.Errorf("%s is in standalonePages but has no sh block: remove it from the list", page)
		}
	}
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	indexBytes, err := os.ReadFile("../docs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	index := string(indexBytes)
	for _, p := range pages {
		page := strings.TrimPrefix(filepath.ToSlash(p), "../")
		blocks, err := readmeBlocks(p)
		if err != nil {
			t.Error(err)
			continue
		}
		_, standalone := standalonePages[page]
		if len(blocks) > 0 && !slices.Contains(walkPages, page) && !standalone {
			t.Errorf("%s has %d sh blocks (the first at line %d) but is in neither walkPages nor standalonePages of e2e/readme_test.go",
				page, len(blocks), blocks[0].line)
		}
		name := filepath.Base(page)
		if name != "README.md" && !strings.Contains(index, "]("+name+")") && !strings.Contains(index, "]("+name+"#") {
			t.Errorf("docs/README.md does not link %s", page)
		}
	}
	if got := indexWalk(index); !slices.Equal(got, walkPages) {
		t.Errorf("docs/README.md's walk-through lists\n%q\nwant walkPages\n%q", got, walkPages)
	}
}

// indexWalk returns the pages of the numbered list under "## The
// walk-through" in docs/README.md, relative to the repository's root.
func indexWalk(index string) []string {
	_, section, ok := strings.Cut(index, "\n## The walk-through\n")
	if !ok {
		return nil
	}
	var pages []string
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		num, rest, ok := strings.Cut(line, ". [")
		if !ok || strings.Trim(num, "0123456789") != "" {
			continue
		}
		_, target, ok := strings.Cut(rest, "](")
		if !ok {
			continue
		}
		target, _, _ = strings.Cut(target, ")")
		pages = append(pages, path.Clean(path.Join("docs", target)))
	}
	return pages
}

func TestReadmeBlocksParse(t *testing.T) {
	dir := t.TempDir()
	md := "# t\n```sh\necho one\n```\ntext\n```toml\na = 1\n```\n```sh\necho two\n```\n"
	p := filepath.Join(dir, "README.md")
	if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readmeBlocks(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []readmeBlock{{2, "echo one\n"}, {9, "echo two\n"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("blocks = %+v, want %+v", got, want)
	}
}

// What the documentation's walk-through leaves outside its directory, removed
// before and after the test.
var (
	readmeTmpPaths = []string{"/tmp/drover-pg", "/tmp/drover-lb", "/tmp/busybox-image", "/tmp/bookworm-root",
		"/tmp/drover-registry", "/tmp/drover-registry.yml", "/tmp/drover-registry.log", "/tmp/drover-demo",
		"/tmp/drover-demo.git", "/tmp/drover-demo.secret"}
	readmeImages = []string{"my-busybox:1", "my-debian:bookworm", "127.0.0.1:5000/demo/busybox:1"}
)

// cleanReadmeState stops the daemons the walk-through starts outside the shell's
// process group (PostgreSQL, nginx), and removes its files and images.
func cleanReadmeState() {
	quiet := func(name string, args ...string) { _ = exec.Command(name, args...).Run() }
	if _, err := os.Stat("/tmp/drover-lb/nginx.pid"); err == nil {
		quiet("/usr/sbin/nginx", "-e", "/tmp/drover-lb/error.log", "-c", "/tmp/drover-lb/nginx.conf", "-s", "stop")
	}
	if _, err := os.Stat("/tmp/drover-pg/data/postmaster.pid"); err == nil {
		if bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(bins) > 0 {
			quiet("runuser", "-u", "postgres", "--", bins[len(bins)-1], "-D", "/tmp/drover-pg/data", "-m", "immediate", "-w", "stop")
		}
	}
	for _, p := range readmeTmpPaths {
		os.RemoveAll(p)
	}
	for _, img := range readmeImages {
		quiet("docker", "rmi", "-f", img)
	}
}

// removeWalkthroughRunners removes what the walk-through's docker runners
// keep on the engine for their next jobs (their slot networks, the
// networks' sandboxes, their cache volumes), found by the runners' tokens
// in the configs the walk-through wrote in dir: a manager stopped with
// its jobs done leaves them for its next start, which never comes here.
func removeWalkthroughRunners(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
	token := regexp.MustCompile(`(?m)^\s*token\s*=\s*"([^"]+)"`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range token.FindAllStringSubmatch(string(b), -1) {
			removeLabelled(t, dockerexec.LabelRunner+"="+api.ShortToken(m[1]))
		}
	}
}

// copyRepo copies the repository's files (tracked and new, not ignored:
// what a fresh clone with the working tree's changes has) to a new
// repository on branch main, as the walk-through's examples expect.
func copyRepo(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "drover")
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join("..", f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=readme", "-c", "user.email=readme@example.invalid", "commit", "-q", "-m", "README test"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dst
}

// TestReadmeBlocks pastes the ```sh blocks of the README and the docs
// pages of walkPages, in order, into one shell in a fresh copy of the
// repository, as a newcomer following them on a fresh machine would, and
// checks that every command succeeds (set -e):
// the coordinator, manager and jobs; PostgreSQL and two coordinators
// behind nginx; the docker executor; images built without a registry; the
// router; the autoscaling simulator; a docker-autoscaler fleet. The first
// block (the main job and the test suite) is left to TestLocal and to the
// test suite itself, which this is part of.
func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("the documentation's walk-through takes minutes")
	}
	if os.Getuid() != 0 {
		t.Skip("the walk-through's blocks install packages and build images with as_root; run the suite as root")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no docker engine: %v", err)
	}
	blocks, err := walkBlocks("..")
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("set -e -o pipefail\n")
	ran := 0
	for _, b := range blocks {
		if strings.Contains(b.text, "scripts/test.sh") {
			continue // the suite this test is part of
		}
		fmt.Fprintf(&script, "echo '=== %s:%d' >&2\n%s", b.page, b.line, b.text)
		ran++
	}
	if ran < 5 {
		t.Fatalf("found %d runnable blocks in the walk-through's pages; the parser or the pages changed", ran)
	}
	script.WriteString("echo '=== README walk-through done' >&2\n")

	cleanReadmeState()
	t.Cleanup(cleanReadmeState)
	work := copyRepo(t)
	t.Cleanup(func() { removeWalkthroughRunners(t, work) })
	logPath := filepath.Join(t.TempDir(), "readme.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()

	// A guard against a hang (a loop waiting for a server that never came),
	// not a measure: the walk-through takes a few minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	// A file, not a pipe: background processes keep their output open, and
	// Wait must return when the shell does.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	stopGroup(t, cmd.Process.Pid)
	out, _ := os.ReadFile(logPath)
	if runErr != nil {
		last := "(before the first block)"
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(l, "=== ") && strings.Contains(l, ".md:") {
				last = strings.TrimPrefix(l, "=== ")
			}
		}
		t.Fatalf("the walk-through's blocks failed in the block at %s: %v\n%s", last, runErr, tail(string(out), 6000))
	}
	for _, want := range []string{
		"hello\n",                // submit --wait shows the job's log
		"hello from the cluster", // through nginx to two coordinators
		"in a container on",      // a docker-autoscaler instance
		"=== README walk-through done",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walk-through's output lacks %q:\n%s", want, tail(string(out), 6000))
		}
	}
}

// stopGroup ends what the shell left running in its process group: SIGTERM
// first, so that managers end their jobs and delete their instances, then
// SIGKILL for what is left after a minute.
func stopGroup(t *testing.T, pgid int) {
	t.Helper()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("processes of the README walk-through still running after SIGTERM; killing them")
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
