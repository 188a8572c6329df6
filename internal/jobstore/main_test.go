package jobstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/drover-ci/drover/internal/jobstore"
)

// helperEnv selects a helper mode when the test binary is re-run as a
// child process (see TestMain).
const helperEnv = "JOBSTORE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain runs in a child process. Mode "lock:<dir>" opens the file
// store at dir, says "locked" and waits to be killed.
func helperMain(mode string) int {
	dir, ok := cutPrefix(mode, "lock:")
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
	s, err := jobstore.Open(context.Background(), &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: dir}}, jobstore.Options{Owner: "child-manager"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println("locked")
	time.Sleep(time.Hour)
	return 0
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// startLockHolder re-runs the test binary as a process holding the file
// store lock on dir, and returns once it holds it.
func startLockHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=lock:"+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper said %q, %v; want \"locked\"", line, err)
	}
	return cmd
}

// redisServer is a redis-server process the test started.
type redisServer struct {
	addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts a redis-server without persistence on a free
// loopback port; t.Cleanup kills it.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed; the Redis store tests need it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	rs := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: t.TempDir()}
	rs.start(t)
	return rs
}

func (rs *redisServer) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(rs.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", rs.dir, "--logfile", filepath.Join(rs.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	rs.cmd = cmd
	t.Cleanup(rs.kill)
	c := redis.NewClient(&redis.Options{Addr: rs.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(rs.dir, "redis.log"))
			t.Fatalf("redis-server on %s did not come up: %v\n%s", rs.addr, err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL, as a crash would.
func (rs *redisServer) kill() {
	if rs.cmd != nil {
		rs.cmd.Process.Kill()
		rs.cmd.Wait()
		rs.cmd = nil
	}
}

func (rs *redisServer) url() string { return "redis://" + rs.addr + "/0" }
