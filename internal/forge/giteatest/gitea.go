// Package giteatest runs a real Gitea for tests of drover's forge support:
// webhooks from the forge into drover, commit statuses from drover back to
// the forge, and git over HTTP.
//
// Start writes an app.ini into the test's temporary directory (SQLite,
// HTTP on a loopback port, no SSH, no mailer, offline, webhooks allowed to
// reach loopback addresses), runs `gitea migrate`, creates an admin user
// with an access token through `gitea admin user create`, then runs
// `gitea web` as a child process in a process group of its own, killed
// when the test ends.
//
// # The binary
//
// Gitea is built once per machine by scripts/gitea/build.sh (scripts/test.sh
// runs it) into $DROVER_CACHE_DIR/bin/gitea-<Version> (else
// ~/.cache/drover/bin). When it is absent Start skips the test, with the
// command to run in the message, or fails it when DROVER_REQUIRE_GITEA=1.
//
// # Logs
//
// Gitea's own log goes to gitea.log in the test's temporary directory; a
// Start that fails puts its tail in the failure.
package giteatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/freeport"
)

// Version is the Gitea release the tests run: the one scripts/gitea/build.sh
// builds by default. (1.27 cannot be built here: see the script.)
const Version = "1.26.0"

// BuildCommand builds the binary where Binary looks for it.
const BuildCommand = "scripts/gitea/build.sh"

// RequireEnv names the environment variable that turns a missing binary
// from a skip into a failure (set it to 1 in CI).
const RequireEnv = "DROVER_REQUIRE_GITEA"

// startBound bounds the whole start (migrate, admin user, web answering).
// It is no expected duration: it only keeps a Gitea that hangs without
// exiting from hanging the test binary. A loaded 2-core machine starts it
// in seconds.
const startBound = 3 * time.Minute

// ErrNotInstalled is returned by Binary when the Gitea binary is absent.
var ErrNotInstalled = errors.New("gitea " + Version + " not found in $DROVER_CACHE_DIR/bin or ~/.cache/drover/bin; build it with: " + BuildCommand)

// Binary returns the path of the Gitea binary of Version in drover's cache.
func Binary() (string, error) {
	dir, err := cachedir.Dir()
	if err != nil {
		return "", ErrNotInstalled
	}
	p := filepath.Join(dir, "bin", "gitea-"+Version)
	if info, err := os.Stat(p); err != nil || !info.Mode().IsRegular() {
		return "", ErrNotInstalled
	}
	return p, nil
}

// Gitea is a running Gitea with one admin user.
type Gitea struct {
	// URL is the root URL, with a trailing slash: http://127.0.0.1:PORT/.
	URL string
	// AdminUser and AdminPassword are the admin's credentials (basic auth,
	// the web UI).
	AdminUser     string
	AdminPassword string
	// Token is an access token of the admin with every scope.
	Token string
	// Dir is Gitea's work path: app.ini, data, repositories, gitea.log.
	Dir string
	// StartTime is how long Start took, from migrate to the API answering.
	StartTime time.Duration

	bin           string
	secretKey     string
	internalToken string
	client        *http.Client
	cmd           *exec.Cmd
	exited        chan struct{}
	stopOnce      sync.Once
}

// Start starts a Gitea for t and stops it when t ends. It skips t when the
// binary is not built (fails it when DROVER_REQUIRE_GITEA=1).
func Start(t testing.TB) *Gitea {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("giteatest: %v (%s=1)", err, RequireEnv)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), startBound)
	defer cancel()
	g, err := start(ctx, bin, t.TempDir())
	if g != nil {
		t.Cleanup(g.Stop)
	}
	if err != nil {
		t.Fatalf("giteatest: %v", err)
	}
	t.Logf("giteatest: gitea %s at %s started in %v", Version, g.URL, g.StartTime.Round(time.Millisecond))
	return g
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start runs Gitea in dir. It returns the Gitea to stop along with any
// error once the web process was started.
func start(ctx context.Context, bin, dir string) (*Gitea, error) {
	began := time.Now()
	g := &Gitea{
		AdminUser: "drover",
		// Random, and long enough for any password policy.
		AdminPassword: "Dr0ver-" + randomHex(12),
		Dir:           dir,
		bin:           bin,
		client:        &http.Client{Transport: &http.Transport{Proxy: nil}},
		secretKey:     randomHex(32),
		internalToken: randomHex(32),
	}
	logf, err := os.OpenFile(filepath.Join(dir, "gitea.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := g.writeConfig(port); err != nil {
		return nil, err
	}

	// migrate first, then the admin: both touch the database, and doing
	// them before `gitea web` keeps them from competing for SQLite's lock.
	if _, err := g.run(ctx, logf, "migrate"); err != nil {
		return nil, g.withLog(err)
	}
	out, err := g.run(ctx, logf, "admin", "user", "create", "--admin",
		"--username", g.AdminUser, "--password", g.AdminPassword, "--email", g.AdminUser+"@example.com",
		"--must-change-password=false", "--access-token", "--access-token-name", "giteatest", "--access-token-scopes", "all")
	if err != nil {
		return nil, g.withLog(err)
	}
	if g.Token, err = parseToken(out); err != nil {
		return nil, err
	}

	// The port was free a moment ago but someone may take it before Gitea
	// binds it: Gitea then exits, and web is started again on another.
	// (Handing Gitea an open listener, LISTEN_FDS, would close that gap,
	// but Gitea then takes itself for the child of a graceful restart and
	// sends its parent, the test binary, SIGTERM.)
	for attempt := 1; ; attempt++ {
		err := g.startWeb(ctx, logf)
		if err == nil {
			g.StartTime = time.Since(began)
			return g, nil
		}
		if attempt == 3 || ctx.Err() != nil || !g.exitedInUse() {
			return g, g.withLog(err)
		}
		if port, err = freePort(); err != nil {
			return g, err
		}
		if err := g.writeConfig(port); err != nil {
			return g, err
		}
	}
}

func freePort() (int, error) {
	port, err := freeport.Port()
	if err != nil {
		return 0, fmt.Errorf("picking a loopback port: %w", err)
	}
	return port, nil
}

func (g *Gitea) writeConfig(port int) error {
	g.URL = fmt.Sprintf("http://127.0.0.1:%d/", port)
	config := filepath.Join(g.Dir, "app.ini")
	if err := os.WriteFile(config, []byte(appIni(g.Dir, port, g.secretKey, g.internalToken)), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", config, err)
	}
	return nil
}

// startWeb starts `gitea web` and waits until it answers.
func (g *Gitea) startWeb(ctx context.Context, logf *os.File) error {
	g.cmd = exec.Command(g.bin, "web", "--config", filepath.Join(g.Dir, "app.ini"), "--work-path", g.Dir)
	g.cmd.Dir = g.Dir
	g.cmd.Env = g.env()
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	g.cmd.SysProcAttr = procAttr()
	g.exited = make(chan struct{})
	if err := g.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s web: %w", g.bin, err)
	}
	cmd, exited := g.cmd, g.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return g.waitReady(ctx)
}

// exitedInUse says whether gitea web exited because its port was taken.
func (g *Gitea) exitedInUse() bool {
	select {
	case <-g.exited:
		return strings.Contains(g.Log(), "address already in use")
	default:
		return false
	}
}

// env is the environment of every gitea command: ours, with Gitea's own
// variables replaced.
func (g *Gitea) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		// LISTEN_FDS would make Gitea take inherited listeners and kill its
		// parent (a graceful restart's child); NOTIFY_SOCKET, talk to systemd.
		if !strings.HasPrefix(kv, "GITEA_") && !strings.HasPrefix(kv, "LISTEN_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return append(env, "GITEA_WORK_DIR="+g.Dir, "GITEA_CUSTOM="+filepath.Join(g.Dir, "custom"))
}

// run runs one gitea command to its end, its output copied to the log.
func (g *Gitea) run(ctx context.Context, log *os.File, args ...string) (string, error) {
	args = append(args, "--config", filepath.Join(g.Dir, "app.ini"), "--work-path", g.Dir)
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = g.Dir
	cmd.Env = g.env()
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	fmt.Fprintf(log, "== gitea %s\n%s", strings.Join(args[:min(len(args), 3)], " "), out.Bytes())
	if err != nil {
		return out.String(), fmt.Errorf("gitea %s: %w: %s", strings.Join(args[:min(len(args), 3)], " "), err, lastLines(out.String(), 20))
	}
	return out.String(), nil
}

// parseToken finds the token in the output of `gitea admin user create
// --access-token`: "Access token was successfully created... TOKEN".
func parseToken(out string) (string, error) {
	const marker = "Access token was successfully created..."
	i := strings.LastIndex(out, marker)
	if i < 0 {
		return "", fmt.Errorf("no access token in the output of gitea admin user create: %q", lastLines(out, 10))
	}
	fields := strings.Fields(out[i+len(marker):])
	if len(fields) == 0 {
		return "", fmt.Errorf("empty access token in the output of gitea admin user create: %q", lastLines(out, 10))
	}
	return fields[0], nil
}

// waitReady asks /api/v1/version until it answers 200, Gitea exits, or
// ctx ends.
func (g *Gitea) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-g.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		var v struct {
			Version string `json:"version"`
		}
		err := g.API(ctx, http.MethodGet, "version", nil, &v)
		if err == nil {
			if v.Version != Version {
				return fmt.Errorf("gitea at %s says version %q, want %q", g.URL, v.Version, Version)
			}
			return nil
		}
		last = err
		select {
		case <-g.exited:
			return fmt.Errorf("gitea web exited before answering (%v); last answer: %v", g.cmd.ProcessState, last)
		case <-ctx.Done():
			return fmt.Errorf("gitea web at %s not answering: %w; last answer: %v", g.URL, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// Stop kills Gitea's process group and waits for Gitea to exit. Tests need
// not call it: Start registers it with t.Cleanup.
func (g *Gitea) Stop() {
	g.stopOnce.Do(func() {
		if g.cmd == nil || g.cmd.Process == nil {
			return
		}
		// SIGKILL: the data dies with the test's temporary directory, so
		// there is nothing for a graceful shutdown to save.
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
		<-g.exited
	})
}

// Log returns Gitea's log so far (the web process and the commands Start ran).
func (g *Gitea) Log() string {
	b, _ := os.ReadFile(filepath.Join(g.Dir, "gitea.log"))
	return string(b)
}

func (g *Gitea) withLog(err error) error {
	return fmt.Errorf("%w\ngitea.log (last lines):\n%s", err, lastLines(g.Log(), 40))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// appIni is the configuration of a Gitea in dir listening on port: only
// what a test needs, so that it starts fast and reaches nothing outside.
func appIni(dir string, port int, secretKey, internalToken string) string {
	root := ""
	if os.Getuid() == 0 {
		// Gitea refuses to run as root without this; tests here run as
		// root in containers and CI.
		root = "I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true\n"
	}
	p := strconv.Itoa(port)
	return `APP_NAME = drover giteatest
RUN_MODE = prod
WORK_PATH = ` + dir + `
` + root + `
[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = ` + p + `
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:` + p + `/
LOCAL_ROOT_URL = http://127.0.0.1:` + p + `/
APP_DATA_PATH = ` + filepath.Join(dir, "data") + `
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = ` + filepath.Join(dir, "data", "gitea.db") + `
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = ` + filepath.Join(dir, "repositories") + `
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = ` + secretKey + `
INTERNAL_TOKEN = ` + internalToken + `

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[webhook]
; drover listens on loopback in the tests.
ALLOWED_HOST_LIST = loopback
DELIVER_TIMEOUT = 30

[queue]
TYPE = channel

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[cron.update_checker]
ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[log]
MODE = console
LEVEL = Info
ROOT_PATH = ` + filepath.Join(dir, "log") + `
`
}
