package runnerapi_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// TestRunnersHooks: the daemon hears of managers' contact (throttled to
// ContactStep, except for a forced one), of removed managers and of
// removed runners, on a real SQLite registry.
func TestRunnersHooks(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	s := runnerapi.NewRunners(st, runnerapi.RunnersConfig{
		Clock: clk, ContactStep: 5 * time.Second,
		Hooks: runnerapi.Hooks{
			ManagerContact: func(k runnerapi.ManagerKey, _ time.Time, known bool) {
				note("contact " + k.SystemID + " known=" + strconv.FormatBool(known))
			},
			RunnerDeleted:  func(id int64) { note("runner deleted " + strconv.FormatInt(id, 10)) },
			ManagerDeleted: func(k runnerapi.ManagerKey) { note("manager deleted " + k.SystemID) },
		},
	})
	rn, _, err := s.CreateRunner(t.Context(), runnerapi.RunnerSpec{Description: "r"})
	if err != nil {
		t.Fatal(err)
	}
	s.Touch(t.Context(), rn, "s_a", api.VersionInfo{}, false)
	s.Touch(t.Context(), rn, "s_a", api.VersionInfo{}, false) // within ContactStep: not written
	s.Touch(t.Context(), rn, "s_a", api.VersionInfo{}, true)  // forced
	clk.Advance(6 * time.Second)
	s.Touch(t.Context(), rn, "s_a", api.VersionInfo{}, false)

	m := runnerapi.NewMux(mustMetrics(t), "adm", nil)
	s.Mount(m)
	srv := httptest.NewServer(m)
	defer srv.Close()
	do := func(method, path, body string, hdr map[string]string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ms, _ := st.ListRunnerManagers(t.Context(), rn.ID)
	if len(ms) != 1 || !ms[0].ContactedAt.Equal(clk.Now()) {
		t.Fatalf("managers = %+v, want s_a contacted at %v", ms, clk.Now())
	}
	if code := do("DELETE", "/api/v4/runners/managers", "{}", map[string]string{"RUNNER-TOKEN": "x"}); code != 403 {
		t.Errorf("unregister manager with a bad token = %d, want 403", code)
	}
	rn2, tok2, _ := s.CreateRunner(t.Context(), runnerapi.RunnerSpec{})
	s.Touch(t.Context(), rn2, "s_b", api.VersionInfo{}, false)
	if code := do("DELETE", "/api/v4/runners/managers", `{"token":"`+tok2+`","system_id":"s_b"}`, nil); code != 204 {
		t.Errorf("unregister manager = %d, want 204", code)
	}
	if code := do("DELETE", "/api/v1/runners/"+strconv.FormatInt(rn.ID, 10), "", map[string]string{"Authorization": "Bearer adm"}); code != 204 {
		t.Errorf("delete runner = %d, want 204", code)
	}
	want := []string{
		"contact s_a known=false", "contact s_a known=true", "contact s_a known=true",
		"contact s_b known=false", "manager deleted s_b", "runner deleted " + strconv.FormatInt(rn.ID, 10),
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
}

func mustMetrics(t *testing.T) *runnerapi.Metrics {
	t.Helper()
	m, err := runnerapi.NewMetrics(nil, "test_")
	if err != nil {
		t.Fatal(err)
	}
	return m
}
