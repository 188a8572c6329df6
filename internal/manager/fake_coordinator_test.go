package manager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// fakeCoordinator is a small runner API v4 server for the manager's
// protocol tests. It is a real HTTP server so requests really cross a
// connection; the tests script its answers.
type fakeCoordinator struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	jobs     []*api.JobResponse // handed out in order
	requests []api.JobRequest
	trace    map[int64]*bytes.Buffer
	patches  []string // Content-Range of every PATCH
	// debugTraces is the debug_trace query of every PATCH.
	debugTraces []string
	updates     []api.UpdateJobRequest
	// patchHook may answer a PATCH itself (return true) before the default.
	patchHook func(w http.ResponseWriter, id int64, start int64, n int) bool
	// updateHook may answer a PUT itself (return true).
	updateHook func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool
	jobStatus  string
	finals     chan api.UpdateJobRequest
	// provisioning records every runner_provisioning body, in order, and
	// provTimes when each came.
	provisioning []api.ProvisioningRequest
	provTimes    []time.Time
	handedOut    map[int64]time.Time // when each job was handed out
	// provHook may answer a runner_provisioning call itself (return true).
	provHook  func(w http.ResponseWriter, id int64, p api.ProvisioningRequest) bool
	ackHeader string
	// events is every job call in arrival order: "PUT <id> <state>",
	// "PATCH <id>", "PROV <id> <status>".
	events []string
}

func (f *fakeCoordinator) event(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

// eventsOf returns the calls about job id, without the id.
func (f *fakeCoordinator) eventsOf(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		kind, rest, _ := strings.Cut(e, " ")
		jid, what, _ := strings.Cut(rest, " ")
		if jid == strconv.FormatInt(id, 10) {
			out = append(out, strings.TrimSpace(kind+" "+what))
		}
	}
	return out
}

func newFakeCoordinator(t *testing.T) *fakeCoordinator {
	f := &fakeCoordinator{t: t, trace: map[int64]*bytes.Buffer{}, handedOut: map[int64]time.Time{}, jobStatus: "running", finals: make(chan api.UpdateJobRequest, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v4/jobs/request", f.request)
	mux.HandleFunc("PUT /api/v4/jobs/{id}", f.update)
	mux.HandleFunc("PATCH /api/v4/jobs/{id}/trace", f.patch)
	mux.HandleFunc("POST /api/v4/jobs/{id}/runner_provisioning", f.provision)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCoordinator) addJob(j *api.JobResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, j)
	f.trace[j.ID] = &bytes.Buffer{}
}

func (f *fakeCoordinator) request(w http.ResponseWriter, r *http.Request) {
	var req api.JobRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	var j *api.JobResponse
	if len(f.jobs) > 0 {
		j, f.jobs = f.jobs[0], f.jobs[1:]
	}
	n := len(f.requests)
	f.mu.Unlock()
	w.Header().Set(api.HeaderLastUpdate, "v"+strconv.Itoa(n))
	if j == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	f.mu.Lock()
	if f.ackHeader != "" {
		w.Header().Set(api.HeaderAckTimeout, f.ackHeader)
	}
	f.handedOut[j.ID] = time.Now()
	f.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(j)
}

func (f *fakeCoordinator) headers(w http.ResponseWriter) {
	f.mu.Lock()
	st := f.jobStatus
	f.mu.Unlock()
	w.Header().Set(api.HeaderJobStatus, st)
	w.Header().Set(api.HeaderTraceUpdateInterval, "1")
}

func (f *fakeCoordinator) update(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var u api.UpdateJobRequest
	if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get(api.HeaderJobToken) != u.Token || u.Token == "" {
		f.t.Errorf("PUT job %d: JOB-TOKEN header %q, body token %q", id, r.Header.Get(api.HeaderJobToken), u.Token)
	}
	f.event("PUT %d %s", id, u.State)
	f.mu.Lock()
	f.updates = append(f.updates, u)
	hook := f.updateHook
	f.mu.Unlock()
	f.headers(w)
	if hook != nil && hook(w, id, u) {
		return
	}
	if u.State == api.StateSuccess || u.State == api.StateFailed {
		f.mu.Lock()
		data := f.trace[id].Bytes()
		f.mu.Unlock()
		if want := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(data)); u.Output.Checksum != want || u.Output.Bytesize != int64(len(data)) {
			f.t.Errorf("final PUT output = %+v, want checksum %s bytesize %d", u.Output, want, len(data))
		}
		f.finals <- u
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeCoordinator) patch(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The manager gave the upload up partway (it stops, or its
		// streamer does): a coordinator stores nothing of a request
		// whose body never arrived whole.
		return
	}
	cr := r.Header.Get("Content-Range")
	var start, end int64
	if _, err := fmt.Sscanf(cr, "%d-%d", &start, &end); err != nil || end-start+1 != int64(len(body)) {
		f.t.Errorf("PATCH Content-Range %q does not fit a %d byte body", cr, len(body))
	}
	if strings.HasPrefix(cr, "bytes") {
		f.t.Errorf("Content-Range %q has a unit", cr)
	}
	f.event("PATCH %d", id)
	f.mu.Lock()
	f.patches = append(f.patches, cr)
	f.debugTraces = append(f.debugTraces, r.URL.Query().Get("debug_trace"))
	hook := f.patchHook
	buf := f.trace[id]
	f.mu.Unlock()
	f.headers(w)
	if hook != nil && hook(w, id, start, len(body)) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if start != int64(buf.Len()) {
		w.Header().Set("Range", fmt.Sprintf("0-%d", buf.Len()))
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return
	}
	buf.Write(body)
	w.Header().Set("Range", fmt.Sprintf("0-%d", buf.Len()))
	w.WriteHeader(http.StatusAccepted)
}

func (f *fakeCoordinator) traceOf(id int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trace[id].String()
}

// testJob is a minimal job payload running script.
func testJob(id int64, script []string, after []string) *api.JobResponse {
	j := &api.JobResponse{
		ID:    id,
		Token: "glcbt-job" + strconv.FormatInt(id, 10),
		JobInfo: api.JobInfo{
			Name: "test", Stage: "test", ProjectID: 1, ProjectName: "p", ProjectFullPath: "g/p",
		},
		RunnerInfo: api.RunnerInfo{Timeout: 60},
		Variables: api.Variables{
			{Key: "CI_JOB_ID", Value: strconv.FormatInt(id, 10), Public: true},
			{Key: "GIT_STRATEGY", Value: "none", Public: true},
		},
		Steps:    []api.Step{{Name: api.StepScript, Script: script, Timeout: 60, When: api.WhenOnSuccess}},
		Features: api.JobFeatures{TraceSections: true, FailureReasons: api.AllFailureReasons},
	}
	if len(after) > 0 {
		j.Steps = append(j.Steps, api.Step{Name: api.StepAfterScript, Script: after, Timeout: 60, When: api.WhenAlways})
	}
	return j
}

func (f *fakeCoordinator) provision(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var p api.ProvisioningRequest
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get(api.HeaderJobToken) == "" {
		f.t.Errorf("runner_provisioning without JOB-TOKEN")
	}
	f.event("PROV %d %s", id, p.Status)
	f.mu.Lock()
	f.provisioning = append(f.provisioning, p)
	f.provTimes = append(f.provTimes, time.Now())
	hook := f.provHook
	f.mu.Unlock()
	if hook != nil && hook(w, id, p) {
		return
	}
	f.headers(w)
	w.WriteHeader(http.StatusOK)
}

func (f *fakeCoordinator) provisionStatuses() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.provisioning {
		out = append(out, p.Status)
	}
	return out
}

func (f *fakeCoordinator) putStates() []api.JobState {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.JobState
	for _, u := range f.updates {
		out = append(out, u.State)
	}
	return out
}
