// Package s3test runs a real S3 server for tests: versitygw (Versity's S3
// gateway) with its posix backend, started by the test binary on a free
// loopback port with a bucket ready, and stopped when the test ends.
//
// The binary is looked for in drover's cache,
// $DROVER_CACHE_DIR/bin (else ~/.cache/drover/bin), where
// scripts/test.sh installs it, then in PATH:
//
//	GOBIN=~/.cache/drover/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// Tests skip with that command in the message when it is absent.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cachedir"
)

// InstallCommand installs the server where Binary finds it.
const InstallCommand = "GOBIN=${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// startTimeout bounds the wait for the server to answer.
const startTimeout = 60 * time.Second

// ErrNotInstalled is returned by Binary when versitygw is not found.
var ErrNotInstalled = errors.New("versitygw not found in $DROVER_CACHE_DIR/bin, ~/.cache/drover/bin or PATH; install it with: " + InstallCommand)

// Binary returns the path of the versitygw binary.
func Binary() (string, error) {
	if dir, err := cachedir.Dir(); err == nil {
		p := filepath.Join(dir, "bin", "versitygw")
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", ErrNotInstalled
}

// Server is a running versitygw with one bucket.
type Server struct {
	// Addr is host:port of the S3 endpoint (plain HTTP).
	Addr      string
	AccessKey string
	SecretKey string
	Bucket    string

	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
}

// Start starts a server for t on 127.0.0.1, with a bucket, and stops it
// when t ends. It skips t when the binary is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartAt(t, "127.0.0.1")
}

// StartAt is Start on the address host (an IP of this machine: the
// docker bridge's, for containers to reach it).
func StartAt(t testing.TB, host string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := start(ctx, bin, t.TempDir(), host)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func start(ctx context.Context, bin, dir, host string) (*Server, error) {
	// A port picked this way may be taken before the server binds it:
	// the server then exits and the start is retried on another.
	var lastErr error
	for range 3 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("picking a port: %w", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		s := &Server{Addr: addr, AccessKey: "drover" + randomHex(4), SecretKey: randomHex(16), Bucket: "drover-cache", exited: make(chan struct{})}
		root := filepath.Join(dir, "root-"+randomHex(4))
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		// The IAM directory lets the STS stand-in (sts.go) add accounts
		// through the admin API.
		iam := filepath.Join(dir, "iam-"+randomHex(4))
		if err := os.MkdirAll(iam, 0o755); err != nil {
			return nil, err
		}
		s.cmd = exec.Command(bin, "--port", addr, "--quiet", "--iam-dir", iam, "posix", root)
		s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
		s.cmd.SysProcAttr = procAttr()
		logf, err := os.Create(filepath.Join(dir, "versitygw-"+randomHex(2)+".log"))
		if err != nil {
			return nil, err
		}
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		if err := s.cmd.Start(); err != nil {
			_ = logf.Close()
			return nil, fmt.Errorf("starting %s: %w", bin, err)
		}
		go func() {
			_ = s.cmd.Wait()
			_ = logf.Close()
			close(s.exited)
		}()
		if err = s.waitReady(ctx); err == nil {
			if err = s.makeBucket(ctx); err == nil {
				return s, nil
			}
		}
		s.Stop()
		log, _ := os.ReadFile(logf.Name())
		lastErr = fmt.Errorf("%w; server log:\n%s", err, log)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// waitReady polls the port until it accepts a connection, the server
// exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", s.Addr)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw on %s exited before answering", s.Addr)
		case <-ctx.Done():
			return fmt.Errorf("versitygw on %s not answering: %w", s.Addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// Client is a minio-go client with the root credentials, for setting up
// and inspecting the bucket.
func (s *Server) Client() *minio.Client {
	c, err := minio.New(s.Addr, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		panic(fmt.Sprintf("s3test: minio client: %v", err)) // only a malformed endpoint fails, and Addr is ours
	}
	return c
}

func (s *Server) makeBucket(ctx context.Context) error {
	if err := s.Client().MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", s.Bucket, err)
	}
	return nil
}

// Config is a [runners.cache.s3] section for the server.
func (s *Server) Config() *cache.S3Config {
	pathStyle := true
	return &cache.S3Config{
		ServerAddress:  s.Addr,
		AccessKey:      s.AccessKey,
		SecretKey:      s.SecretKey,
		BucketName:     s.Bucket,
		BucketLocation: "us-east-1",
		Insecure:       true,
		PathStyle:      &pathStyle,
	}
}

// Keys lists the object names in the bucket, sorted.
func (s *Server) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	for obj := range s.Client().ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("listing %s: %w", s.Bucket, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	slices.Sort(keys)
	return keys, nil
}

// Stop kills the server and waits for it to exit. It may be called more
// than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
		<-s.exited
	})
}
