package httpserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	_, addr := start(t, h, o)
	return addr
}

// start serves h with o on a loopback port and returns the server and its
// address.
func start(t *testing.T, h http.Handler, o Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(h, o)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

// TestSlowBodyIsCut: a client that sends its headers and then trickles a
// body that never completes holds its connection for ReadTimeout, not
// forever.
func TestSlowBodyIsCut(t *testing.T) {
	handled := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		handled <- err
	}), Options{ReadTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte now and then, never the whole body
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	select {
	case err := <-handled:
		if err == nil {
			t.Fatal("the slow body was read to its end; want a read timeout")
		}
	case <-time.After(30 * time.Second): // only reached when nothing cuts it
		t.Fatal("a slow body held its connection for 30 s with ReadTimeout 200 ms")
	}
	// The server closes the connection: the client reads an answer or EOF,
	// not a hang.
	if _, err := io.ReadAll(conn); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("read after the timeout: %v", err)
	}
}

// TestLongPollOutlivesReadTimeout: a request whose body arrived in time
// may wait for its answer far longer than ReadTimeout (a held long poll),
// and its context is not canceled by the read deadline.
func TestLongPollOutlivesReadTimeout(t *testing.T) {
	const rt = 100 * time.Millisecond
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-time.After(5 * rt):
			io.WriteString(w, "held and answered")
		case <-r.Context().Done():
			// the client sees an empty answer
		}
	}), Options{ReadTimeout: rt})
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"token":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "held and answered" {
		t.Errorf("long poll answer = %q, want it held past ReadTimeout and answered", b)
	}
}

// TestHeadersAreCapped: headers above MaxHeaderBytes are refused (431).
func TestHeadersAreCapped(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), Options{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2*DefaultMaxHeaderBytes))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status = %d, want 431", resp.StatusCode)
	}
}
