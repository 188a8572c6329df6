// Package conntest opens raw client connections from chosen loopback
// addresses, for tests of connection caps: Linux routes all of
// 127.0.0.0/8 to the loopback interface, so 127.0.0.2 and 127.0.0.3 are
// two clients to a server on 127.0.0.1.
package conntest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Dial connects to addr from the address from; the connection is closed
// when the test ends.
func Dial(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Answer is what a server answered.
type Answer struct {
	Status     int
	Body       string
	RetryAfter string
}

// Get sends GET path on c (keep-alive) and reads the answer, failing the
// test when there is none within 10 s.
func Get(t testing.TB, c net.Conn, path string) Answer {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		t.Fatalf("GET %s from %s: %v", path, c.LocalAddr(), err)
	}
	a, err := Read(c, 10*time.Second)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, c.LocalAddr(), err)
	}
	return a
}

// Read reads one answer from c, waiting at most wait for it. It leaves c's
// read deadline set.
func Read(c net.Conn, wait time.Duration) (Answer, error) {
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return Answer{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("read answer body: %w", err)
	}
	return Answer{Status: resp.StatusCode, Body: string(b), RetryAfter: resp.Header.Get("Retry-After")}, nil
}
