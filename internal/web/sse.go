package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Live updates are Server-Sent Events. The jobs table is rendered anew
// every Config.Poll and sent when it changed; a job's log is sent as it
// grows, parsed: each message lists the events of the lines that arrived
// (as app.js applies them) and its id is the offset in the log where the
// next one starts, so a reconnecting EventSource (Last-Event-ID) resumes
// where it stopped.
//
// Messages of the log stream:
//
//	event: log     data: [{"t":"line","h":HTML} | {"t":"start","n":name,"h":HTML,"c":collapsed} | {"t":"end","n":name,"d":"12s"}, ...]
//	event: facts   data: the job's facts, HTML (its status changed)
//	event: reset   the log started over (the job went back to the queue): reload
//	event: tail    the log grew by liveSpan tails since the page's start: the
//	               page reloads at the new tail (when following), which bounds
//	               what the browser holds and what a reconnect re-parses
//	event: done    the job finished and the whole log was sent
//
// and of the jobs stream:
//
//	event: rows    data: the table's rows, HTML

// sse writes an event stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	// Tell proxies such as nginx not to buffer the stream.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	s.rc.Flush()
	return s
}

// send writes one message (data may have several lines) and flushes it.
func (s *sse) send(event, id, data string) error {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	if _, err := s.w.Write([]byte(b.String())); err != nil {
		return err
	}
	return s.rc.Flush()
}

// ping writes a comment: it finds out soon that the client went away.
func (s *sse) ping() error {
	if _, err := s.w.Write([]byte(": ping\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}

// wait blocks until ch receives, Poll passes or ctx is done (false).
func (u *UI) wait(ctx context.Context, ch <-chan struct{}) bool {
	t := u.cfg.Clock.NewTimer(u.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
	case <-t.C():
	}
	return true
}

// handleJobsEvents is GET /jobs/events?<the filter of /jobs>: the rows of
// the table whenever they change.
func (u *UI) handleJobsEvents(w http.ResponseWriter, r *http.Request, cr credentials) {
	f, _, err := u.jobsQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if cr.project != "" {
		f.Project = cr.project
	}
	ctx := r.Context()
	s := newSSE(w)
	last := ""
	for {
		jobs, _, _, err := u.listJobs(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				u.log.Warn("web: live jobs table", "err", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := u.tmpl.ExecuteTemplate(&buf, "rows", jobs); err != nil {
			u.log.Error("web: render rows", "err", err)
			return
		}
		if rows := buf.String(); rows != last {
			if s.send("rows", "", rows) != nil {
				return
			}
			last = rows
		} else if s.ping() != nil {
			return
		}
		if !u.wait(ctx, nil) {
			return
		}
	}
}

// liveSpan is how many Config.LogTail a live page follows before it
// starts over at the log's new tail.
const liveSpan = 8

// sseBatch is about how many bytes of rendered log one "log" event of the
// live log carries at most (a single longer line is sent on its own).
const sseBatch = 64 << 10

// logEvent is an Event as app.js reads it.
type logEvent struct {
	T         string `json:"t"`
	HTML      string `json:"h,omitempty"`
	Name      string `json:"n,omitempty"`
	Collapsed bool   `json:"c,omitempty"`
	Duration  string `json:"d,omitempty"`
}

func toLogEvent(ev Event) logEvent {
	switch ev.Kind {
	case EventStart:
		return logEvent{T: "start", Name: ev.Name, HTML: ev.HTML, Collapsed: ev.Collapsed}
	case EventEnd:
		return logEvent{T: "end", Name: ev.Name, Duration: formatDuration(ev.Duration)}
	}
	return logEvent{T: "line", HTML: ev.HTML}
}

// handleLogEvents is GET /jobs/{id}/log?from=F&offset=N: job id's log
// from offset N (a line boundary the page gave; Last-Event-ID when the
// browser reconnects) as it grows, and its facts when its status changes,
// until the job finished. The page's log starts at offset F (0 when
// absent): the log is parsed from there, as the page's was.
func (u *UI) handleLogEvents(w http.ResponseWriter, r *http.Request, cr credentials) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	at := q.Get("offset")
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		at = last
	}
	var start, off int64
	for _, p := range []struct {
		name, s string
		to      *int64
	}{{"from", q.Get("from"), &start}, {"offset", at, &off}} {
		if p.s == "" {
			continue
		}
		if *p.to, err = strconv.ParseInt(p.s, 10, 64); err != nil || *p.to < 0 {
			http.Error(w, p.name+" must be a non-negative integer", http.StatusBadRequest)
			return
		}
	}
	if start > off {
		http.Error(w, "from must not be past offset", http.StatusBadRequest)
		return
	}
	// The request's work ends with the client: a cancelled context stops
	// the read between two chunks, and so does a failed send.
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	j, err := u.cfg.Jobs.Job(ctx, id)
	if err != nil || !cr.sees(j.Project) {
		http.Error(w, "no such job", http.StatusNotFound)
		return
	}
	var changed <-chan struct{}
	if u.cfg.Notifier != nil {
		ch, cancel := u.cfg.Notifier.Subscribe(id)
		defer cancel()
		changed = ch
	}
	s := newSSE(w)
	status := j.Status
	// The parser reads the log from where the page's starts: its state
	// (colours, open sections) at off is that of the page; events up to
	// off are the page's already.
	parser := NewParserAt(start)
	// What one request reads is bounded whatever the log's size: at most
	// liveSpan LogTails from the page's start (then the page starts over
	// at the log's tail), sent in batches of about sseBatch bytes as they
	// are parsed, never gathered whole.
	limit := start + liveSpan*u.cfg.LogTail
	var (
		batch     []logEvent
		batchSize int
		sendErr   error
	)
	flush := func(id int64) error {
		if len(batch) == 0 {
			return nil
		}
		b, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		batch, batchSize = batch[:0], 0
		return s.send("log", strconv.FormatInt(max(off, id), 10), string(b))
	}
	collect := func(ev Event) {
		if ev.End <= off || sendErr != nil {
			return
		}
		batch = append(batch, toLogEvent(ev))
		batchSize += len(ev.HTML) + len(ev.Name) + 32
		if batchSize >= sseBatch {
			// A line boundary: the page can carry on from ev.End.
			if sendErr = flush(ev.End); sendErr != nil {
				stop()
			}
		}
	}
	pos := start
	for first := true; ; first = false {
		if !first {
			// The status first: a final status is stored only after the
			// log it covers.
			if j, err = u.cfg.Jobs.Job(ctx, id); err != nil {
				return
			}
		}
		size, err := u.cfg.Logs.LogSize(ctx, id)
		if err != nil {
			return
		}
		if size < pos {
			// The log started over: the job went back to the queue and
			// another runner took it.
			s.send("reset", "", "")
			return
		}
		end := min(size, limit)
		if err = u.readLog(ctx, id, pos, end, parser, collect); err != nil || sendErr != nil {
			if err != nil && ctx.Err() == nil {
				u.log.Warn("web: live log", "job_id", id, "err", err)
			}
			return
		}
		pos = max(pos, end)
		if size > limit {
			// The log grew far past the page's start: what was read is
			// sent, the page starts over at the log's new tail.
			if flush(parser.Offset()) == nil {
				s.send("tail", "", "")
			}
			return
		}
		done := Finished(j.Status)
		if done {
			parser.Flush(collect)
		}
		if flush(parser.Offset()) != nil {
			return
		}
		if j.Status != status {
			status = j.Status
			var buf bytes.Buffer
			if err := u.tmpl.ExecuteTemplate(&buf, "facts", u.jobPage(cr, j)); err != nil {
				u.log.Error("web: render facts", "err", err)
				return
			}
			if s.send("facts", "", buf.String()) != nil {
				return
			}
		}
		if done {
			s.send("done", "", j.Status)
			return
		}
		if s.ping() != nil || !u.wait(ctx, changed) {
			return
		}
	}
}
