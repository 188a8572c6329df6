package runnerapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestAllowSlowBody: a body that pauses longer than the server's
// ReadTimeout is read whole when the handler lifted the deadline, and cut
// off when it did not.
func TestAllowSlowBody(t *testing.T) {
	t.Parallel()
	const readTimeout = 100 * time.Millisecond
	started := make(chan struct{}, 2)
	mux := http.NewServeMux()
	handle := func(lift bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if lift {
				AllowSlowBody(w, r, 1<<20)
			}
			started <- struct{}{}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d", len(b))
		}
	}
	mux.HandleFunc("/lifted", handle(true))
	mux.HandleFunc("/plain", handle(false))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadTimeout: readTimeout}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	for path, want := range map[string]int{"/lifted": http.StatusOK, "/plain": http.StatusBadRequest} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345", path)
		<-started
		// Past the server's read deadline: the pause is the point.
		time.Sleep(3 * readTimeout)
		conn.Write([]byte("67890"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != want || (want == http.StatusOK && string(body) != "10") {
			t.Errorf("%s: %d %q, want %d", path, resp.StatusCode, body, want)
		}
	}
}
