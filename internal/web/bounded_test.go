package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/drover-ci/drover/internal/web"
)

// TestLiveLogBoundedWithoutFrom: a client that asks for a large log's
// live stream without from or offset (not the page, which always gives
// them) gets it in bounded batches, each at a line boundary it could
// resume from, and at most liveSpan tails of it before "tail": never the
// whole log gathered into one event (a 52 MB log made one request take
// the coordinator from 69 MB to 934 MB).
func TestLiveLogBoundedWithoutFrom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tok := e.running(map[string]any{"name": "big", "script": []string{"true"}})
	line := strings.Repeat("y", 90) + "\n"
	chunk := strings.Repeat(line, (1<<20)/len(line))
	const total = 12 << 20
	size := 0
	for size < total {
		e.patch(id, tok, size, chunk)
		size += len(chunk)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/jobs/%d/log", e.srv.URL, id), nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var (
		received, biggest, batches int
		last                       int
	)
	for ev := range readEvents(resp.Body) {
		switch ev.event {
		case "log":
			batches++
			received += len(ev.data)
			biggest = max(biggest, len(ev.data))
			at, err := strconv.Atoi(ev.id)
			if err != nil || at <= last || at%len(line) != 0 {
				t.Fatalf("log event id %q after %d: want a growing line boundary", ev.id, last)
			}
			last = at
		case "tail":
			if biggest > 256<<10 {
				t.Errorf("the biggest log event is %d bytes, want batches of about 64 KiB", biggest)
			}
			if last > 8*web.DefaultLogTail+len(line) {
				t.Errorf("the stream went on to offset %d of %d before tail, want at most 8 tails (%d)", last, size, 8*web.DefaultLogTail)
			}
			t.Logf("%d-byte log, no from: %d bytes in %d batches (biggest %d) up to offset %d, then tail", size, received, batches, biggest, last)
			return
		case "done", "reset":
			t.Fatalf("%s event on a running job", ev.event)
		}
	}
	t.Fatalf("the stream ended without tail after %d batches up to offset %d", batches, last)
}

// endlessLog is a running job's log of size bytes made up as it is read
// (nothing held), counting what was read.
type endlessLog struct {
	size int64
	read atomic.Int64
}

func (l *endlessLog) LogSize(context.Context, int64) (int64, error) { return l.size, nil }

func (l *endlessLog) OpenLog(_ context.Context, _, off int64) (io.ReadCloser, error) {
	return io.NopCloser(&lineReader{l: l, off: off}), nil
}

type lineReader struct {
	l   *endlessLog
	off int64
}

func (r *lineReader) Read(p []byte) (int, error) {
	if r.off >= r.l.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.l.size-r.off))
	for i := range n {
		if (r.off+int64(i))%100 == 99 {
			p[i] = '\n'
		} else {
			p[i] = 'z'
		}
	}
	r.off += int64(n)
	r.l.read.Add(int64(n))
	return n, nil
}

// runningJobs knows one running job.
type runningJobs struct{ web.Jobs }

func (runningJobs) Job(_ context.Context, id int64) (web.Job, error) {
	return web.Job{ID: id, Name: "endless", Status: "running"}, nil
}

// TestLiveLogStopsWhenClientLeaves: the live log's read of stored data
// ends when its client goes away, not when the whole log has been read
// (with a 150 MiB log the coordinator's memory kept rising for 33 s after
// the client left).
func TestLiveLogStopsWhenClientLeaves(t *testing.T) {
	t.Parallel()
	logs := &endlessLog{size: 4 << 30}
	// LogTail so large that only the client's leaving can end the read.
	ui, err := web.New(slog.New(slog.DiscardHandler), web.Config{Jobs: runningJobs{}, Logs: logs, AdminToken: "admin-token", LogTail: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	ui.Mount(mux)
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if strings.HasSuffix(r.URL.Path, "/log") {
				close(returned)
			}
		}()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/jobs/7/log", nil)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := readEvents(resp.Body)
	next(t, events, "log")
	cancel()
	resp.Body.Close()
	for range events {
	}
	<-returned
	if n := logs.read.Load(); n >= logs.size/4 {
		t.Errorf("the handler read %d of the log's %d bytes after its client left", n, logs.size)
	} else {
		t.Logf("the client left after one batch; the handler had read %d bytes", n)
	}
}
