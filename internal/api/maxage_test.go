package api

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnectionMaxAge sends job requests to a real server over loopback
// and counts the connections it accepts: with a maximum age that has
// passed before each request every request opens one, with a long one all
// share the first, and a change on the running client (a reload) takes
// effect at its next request.
func TestConnectionMaxAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		maxAge  time.Duration
		change  time.Duration // SetConnectionMaxAge after the first 3 requests; -1: none
		wantNew int64         // connections for 6 requests
	}{
		{name: "passed before every request", maxAge: time.Nanosecond, change: -1, wantNew: 6},
		{name: "long", maxAge: time.Hour, change: -1, wantNew: 1},
		{name: "no limit", maxAge: 0, change: -1, wantNew: 1},
		{name: "lowered on reload", maxAge: time.Hour, change: time.Nanosecond, wantNew: 1 + 3},
		{name: "removed on reload", maxAge: time.Nanosecond, change: 0, wantNew: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opened atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c, err := NewClient(srv.URL, ClientOptions{ConnectionMaxAge: tt.maxAge})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				if i == 3 && tt.change >= 0 {
					c.SetConnectionMaxAge(tt.change)
				}
				if _, resp, err := c.RequestJob(t.Context(), JobRequest{Token: "glrt-x"}); err != nil || resp.StatusCode != http.StatusNoContent {
					t.Fatalf("RequestJob %d = %v, %v", i, resp, err)
				}
			}
			if got := opened.Load(); got != tt.wantNew {
				t.Errorf("connections opened = %d, want %d", got, tt.wantNew)
			}
		})
	}
}
