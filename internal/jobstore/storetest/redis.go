package storetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/drover-ci/drover/internal/freeport"
)

// RedisServer is a redis-server process a test started.
type RedisServer struct {
	// Addr is its host:port.
	Addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server without persistence on a free loopback
// port, or skips the test when none is installed; t.Cleanup kills it.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed; the Redis store tests need it")
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	rs := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: t.TempDir()}
	rs.Start(t)
	return rs
}

// Start starts the server (again, after Kill) and waits until it answers.
func (rs *RedisServer) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(rs.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", rs.dir, "--logfile", filepath.Join(rs.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	rs.cmd = cmd
	t.Cleanup(rs.Kill)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(rs.dir, "redis.log"))
			t.Fatalf("redis-server on %s did not come up: %v\n%s", rs.Addr, err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL, as a crash would.
func (rs *RedisServer) Kill() {
	if rs.cmd != nil {
		rs.cmd.Process.Kill()
		rs.cmd.Wait()
		rs.cmd = nil
	}
}

// URL is the server's database 0 as a redis:// URL.
func (rs *RedisServer) URL() string { return "redis://" + rs.Addr + "/0" }
