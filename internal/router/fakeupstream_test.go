package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// fakeUpstream is a small coordinator with the two-phase job start, for
// the router's upstream side while drover's coordinator gains it: jobs
// go pending → waiting_for_runner_ack (deadline ack) → running → done; a
// passed deadline or a decline returns a job to the queue; a hand-out gets
// a new job token. Long polls are held up to longPoll.
type fakeUpstream struct {
	t        testing.TB
	srv      *httptest.Server
	ack      time.Duration
	longPoll time.Duration
	twoPhase bool // hand out two-phase jobs to runners that announce it

	requests  atomic.Int64
	declines  atomic.Int64
	expiries  atomic.Int64
	keepAlive atomic.Int64

	mu      sync.Mutex
	jobs    map[int64]*fakeJob
	order   []int64 // queue, FIFO
	nextID  int64
	version int64
	wake    chan struct{} // closed and replaced on every enqueue
}

type fakeJob struct {
	id       int64
	project  string
	state    string // pending, waiting, running, success, failed
	token    string
	deadline time.Time
	trace    []byte
	handouts int
}

func newFakeUpstream(t testing.TB, ack time.Duration) *fakeUpstream {
	f := &fakeUpstream{t: t, ack: ack, longPoll: 2 * time.Second, twoPhase: true,
		jobs: map[int64]*fakeJob{}, wake: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v4/runners/verify", func(w http.ResponseWriter, r *http.Request) {
		runnerapi.WriteJSON(w, http.StatusOK, api.VerifyResponse{ID: 1, Token: r.Header.Get(api.HeaderRunnerToken)})
	})
	mux.HandleFunc("POST /api/v4/jobs/request", f.request)
	mux.HandleFunc("POST /api/v4/jobs/{id}/runner_provisioning", f.provisioning)
	mux.HandleFunc("PUT /api/v4/jobs/{id}", f.update)
	mux.HandleFunc("PATCH /api/v4/jobs/{id}/trace", f.patch)
	f.srv = httptest.NewServer(mux)
	stop := make(chan struct{})
	go f.reap(stop)
	t.Cleanup(func() {
		close(stop)
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

func (f *fakeUpstream) reap(stop chan struct{}) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		f.mu.Lock()
		for _, j := range f.jobs {
			if j.state == "waiting" && now.After(j.deadline) {
				f.expiries.Add(1)
				f.requeueLocked(j)
			}
		}
		f.mu.Unlock()
	}
}

func (f *fakeUpstream) requeueLocked(j *fakeJob) {
	j.state, j.token = "pending", ""
	f.order = append(f.order, j.id)
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeUpstream) add(project string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	j := &fakeJob{id: f.nextID, project: project, state: "pending"}
	f.jobs[j.id] = j
	f.requeueLocked(j)
	return j.id
}

func (f *fakeUpstream) job(id int64) fakeJob {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.jobs[id]
}

func (f *fakeUpstream) request(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	var req api.JobRequest
	json.NewDecoder(r.Body).Decode(&req)
	timer := time.NewTimer(f.longPoll)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if len(f.order) > 0 {
			id := f.order[0]
			f.order = f.order[1:]
			j := f.jobs[id]
			j.handouts++
			j.token = fmt.Sprintf("glcbt-fake-%d-%d", id, j.handouts)
			two := f.twoPhase && req.Info.Features.TwoPhaseJobCommit
			if two {
				j.state, j.deadline = "waiting", time.Now().Add(f.ack)
				w.Header().Set(HeaderAckTimeout, strconv.Itoa(int(f.ack/time.Second)))
			} else {
				j.state = "running"
			}
			f.version++
			w.Header().Set(api.HeaderLastUpdate, strconv.FormatInt(f.version, 10))
			f.mu.Unlock()
			runnerapi.WriteJSON(w, http.StatusCreated, map[string]any{
				"id": id, "token": j.token,
				"job_info":    map[string]any{"name": "j", "project_full_path": j.project},
				"variables":   []api.Variable{{Key: "CI_JOB_ID", Value: strconv.FormatInt(id, 10)}},
				"steps":       []api.Step{{Name: "script", Script: []string{"true"}, When: "on_success"}},
				"features":    map[string]any{"two_phase_job_commit": two, "trace_sections": true},
				"runner_info": map[string]any{"timeout": 60},
				"secrets":     map[string]any{"kept": true}, // an unknown key the router must pass on
			})
			return
		}
		wake := f.wake
		v := strconv.FormatInt(f.version, 10)
		f.mu.Unlock()
		if req.LastUpdate != v {
			w.Header().Set(api.HeaderLastUpdate, v)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			w.Header().Set(api.HeaderLastUpdate, v)
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// owned loads job {id} if tok is its current token; otherwise it answers
// 409 with Job-Status and returns nil.
func (f *fakeUpstream) ownedLocked(w http.ResponseWriter, r *http.Request, tok string) *fakeJob {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	j := f.jobs[id]
	if tok == "" {
		tok = r.Header.Get(api.HeaderJobToken)
	}
	if j == nil || j.token == "" || j.token != tok {
		w.Header().Set(api.HeaderJobStatus, api.RemoteCanceled)
		runnerapi.WriteError(w, http.StatusConflict, "not yours", "")
		return nil
	}
	return j
}

func (f *fakeUpstream) provisioning(w http.ResponseWriter, r *http.Request) {
	var p api.ProvisioningRequest
	json.NewDecoder(r.Body).Decode(&p)
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.ownedLocked(w, r, "")
	if j == nil {
		return
	}
	if j.state != "waiting" {
		w.Header().Set(api.HeaderJobStatus, j.state)
		runnerapi.WriteError(w, http.StatusConflict, "job is "+j.state, "")
		return
	}
	switch p.Status {
	case "pending":
		f.keepAlive.Add(1)
		j.deadline = time.Now().Add(f.ack)
	case "accepted":
		j.state = "running"
	case "declined":
		f.declines.Add(1)
		f.requeueLocked(j)
	}
	runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
}

func (f *fakeUpstream) update(w http.ResponseWriter, r *http.Request) {
	var u api.UpdateJobRequest
	json.NewDecoder(r.Body).Decode(&u)
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.ownedLocked(w, r, u.Token)
	if j == nil {
		return
	}
	switch {
	case j.state == "waiting" && u.State == api.StateRunning:
		j.state = "running"
	case j.state == "waiting" && u.State == api.StatePending:
		j.deadline = time.Now().Add(f.ack)
	case j.state == "running" && (u.State == api.StateSuccess || u.State == api.StateFailed):
		j.state = string(u.State)
	case j.state == "running" && u.State == api.StateRunning:
	default:
		w.Header().Set(api.HeaderJobStatus, j.state)
		runnerapi.WriteError(w, http.StatusConflict, "job is "+j.state, "")
		return
	}
	w.Header().Set(api.HeaderJobStatus, api.RemoteRunning)
	w.Header().Set(api.HeaderTraceUpdateInterval, "3")
	runnerapi.WriteJSON(w, http.StatusOK, struct{}{})
}

func (f *fakeUpstream) patch(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.ownedLocked(w, r, "")
	if j == nil {
		return
	}
	var buf [1 << 16]byte
	n, _ := r.Body.Read(buf[:])
	j.trace = append(j.trace, buf[:n]...)
	w.Header().Set("Range", fmt.Sprintf("0-%d", len(j.trace)))
	w.WriteHeader(http.StatusAccepted)
}
