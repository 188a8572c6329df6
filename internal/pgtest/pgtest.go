// Package pgtest runs a real PostgreSQL server for tests: Debian's package
// postgresql (binaries under /usr/lib/postgresql/<version>/bin), started by
// the test binary itself on a free loopback port with its own data
// directory in a temporary directory.
//
// # Use
//
// [NewDatabase] creates a fresh database on the binary's shared server,
// starting that server on first use, and drops the database when the test
// ends. Call [Stop] from TestMain after m.Run so the server is shut down
// and its directory removed:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		pgtest.Stop()
//		os.Exit(code)
//	}
//
// A test that needs a server of its own (to stop it, say) calls [Start].
//
// # Isolation
//
// Every test binary starts its own server: its own port (a port taken by
// another binary between the pick and the bind is retried with another),
// its own data directory, and no Unix socket. A cluster the package's
// postinst may have started on 5432 is neither used nor disturbed.
//
// # Root
//
// PostgreSQL refuses to run as root. Run as root, initdb and postgres are
// started with the credentials of the user postgres (which the package
// creates), and the temporary directory is given to that user. The
// credentials are set on the child directly rather than through runuser so
// that the server is the test binary's own child: it then gets the
// parent-death signal and does not outlive a test binary that is killed
// before Stop runs (its temporary directory, pgtest-*, does).
//
// # Speed
//
// The cluster runs with fsync off and no durability: initdb takes about a
// second, the server is up some tens of milliseconds later, and a database
// costs one CREATE DATABASE (about a tenth of a second).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/freeport"
)

// ErrNotInstalled is returned by Start when no PostgreSQL server binaries
// are found; tests skip on it.
var ErrNotInstalled = errors.New("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin or in PATH: install Debian's package postgresql")

// startTimeout bounds Start: initdb plus the server coming up.
const startTimeout = 60 * time.Second

// restartTimeout bounds a Restart's server coming up again. A server that
// exits is noticed at once (waitReady); the bound only guards one that
// runs and never answers, so it is wide: on a 2-core machine at load 200
// (a test's thousand shell jobs beside it) a restart took over a minute.
const restartTimeout = 5 * time.Minute

// Server is a PostgreSQL server started by Start. Its superuser is
// postgres, with trust authentication on 127.0.0.1.
type Server struct {
	dir     string // temporary root: data/ and postgres.log
	port    int
	version string // major version, e.g. "15"
	bin     string // directory of the server binaries
	cred    *syscall.Credential
	stopMu  sync.Mutex // Stop may be called from several goroutines
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the server process has exited
	waitErr error         // the process's exit, once exited is closed
}

// Start initializes a cluster in a new temporary directory and starts a
// server on it. It returns ErrNotInstalled when PostgreSQL is missing.
func Start(ctx context.Context) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	bin, version, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temporary directory: %w", err)
	}
	s := &Server{dir: dir, version: version, bin: bin, cred: cred}
	if err := s.initdb(ctx, bin, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A port picked free can be taken by another test binary before the
	// server binds it: try again with another one.
	const attempts = 5
	for i := 1; ; i++ {
		port, err := freeport.Port()
		if err != nil {
			err = fmt.Errorf("pgtest: find a free port: %w", err)
		} else {
			err = s.start(ctx, bin, cred, port)
		}
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || i == attempts {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// findBinaries returns the directory of the newest installed server's
// binaries and its major version.
func findBinaries() (bin, version string, err error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	best := -1
	for _, m := range matches {
		v := filepath.Base(filepath.Dir(filepath.Dir(m)))
		n, err := strconv.Atoi(v)
		if err != nil || n <= best {
			continue
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(m), "initdb")); err != nil {
			continue
		}
		best, bin, version = n, filepath.Dir(m), v
	}
	if bin != "" {
		return bin, version, nil
	}
	// Not Debian's layout: the binaries may be in PATH.
	p, err := exec.LookPath("postgres")
	if err != nil {
		return "", "", ErrNotInstalled
	}
	if _, err := exec.LookPath("initdb"); err != nil {
		return "", "", ErrNotInstalled
	}
	return filepath.Dir(p), "", nil
}

// credential returns the credentials to run PostgreSQL with: those of the
// user postgres when running as root, none (the current user) otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses to run as root; user postgres (created by the package postgresql): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: uid of postgres %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: gid of postgres %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

func (s *Server) initdb(ctx context.Context, bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: give %s to postgres: %w", s.dir, err)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb in %s: %w\n%s", s.dataDir(), err, out)
	}
	return nil
}

// childEnv is the environment of initdb and postgres: the test's, without
// the libpq variables that could point them elsewhere.
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	return append(env, "LC_ALL=C")
}

var errPortTaken = errors.New("port taken")

// start starts the server on a free port and waits until it accepts
// connections.
func (s *Server) start(ctx context.Context, bin string, cred *syscall.Credential, port int) error {
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: server log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	// Not CommandContext: the server outlives ctx, which bounds the start only.
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", s.dataDir(), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "max_connections=300",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.port, s.cmd, s.exited = port, cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		log, _ := os.ReadFile(s.logPath())
		if strings.Contains(string(log), "could not bind") || strings.Contains(string(log), "could not create any TCP/IP sockets") {
			os.Remove(s.logPath())
			return fmt.Errorf("pgtest: port %d: %w", port, errPortTaken)
		}
		return fmt.Errorf("pgtest: postgres on port %d: %w\n%s", port, err, log)
	}
	return nil
}

// waitReady connects until the server answers, it exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := pgx.Connect(cctx, s.URL("postgres"))
			if err != nil {
				return err
			}
			return c.Close(cctx)
		}()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited before accepting connections: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last attempt: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// URL returns the connection URL of database on the server.
func (s *Server) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Version returns the server's major version ("15"), or "" when the
// binaries were found in PATH.
func (s *Server) Version() string { return s.version }

// CreateDatabase creates a database with a new unique name and returns its
// name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	var b [6]byte
	rand.Read(b[:])
	name := "test_" + hex.EncodeToString(b[:])
	err := s.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return name, nil
}

// DropDatabase drops database name, closing its connections first.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

func (s *Server) admin(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// NewDatabase creates a fresh database on s, returns its URL and drops it
// when t ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name, err := s.CreateDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context is done by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return s.URL(name)
}

// Stop shuts the server down (a fast shutdown, then a kill after ten
// seconds) and removes its directory. It may be called more than once.
func (s *Server) Stop() error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.cmd == nil {
		return nil
	}
	var err error
	// SIGINT is PostgreSQL's fast shutdown: sessions are ended, no wait.
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		err = errors.New("pgtest: postgres did not stop within 10s: killed")
		s.kill()
	}
	s.cmd = nil
	return errors.Join(err, os.RemoveAll(s.dir))
}

// Restart shuts the server down (a fast shutdown: every session is ended,
// as in a real restart), calls whileDown if not nil, and starts it again on
// the same port with the same data. Clients see their connections broken,
// then refused, then accepted again.
func (s *Server) Restart(ctx context.Context, whileDown func()) error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.cmd == nil {
		return errors.New("pgtest: restart of a stopped server")
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-ctx.Done():
		return fmt.Errorf("pgtest: restart: waiting for the server to stop: %w", ctx.Err())
	}
	s.cmd = nil
	if whileDown != nil {
		whileDown()
	}
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	// The port was ours a moment ago; another process taking it in
	// between is unlikely, and fatal to the test (clients know the port).
	if err := s.start(ctx, s.bin, s.cred, s.port); err != nil {
		return fmt.Errorf("pgtest: restart: %w", err)
	}
	return nil
}

// kill kills the server process and waits for it to exit.
func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}
