package coordinator

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// gitRepo makes a repository with one commit of files on branch main
// and returns its path.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", "-A")
	run("commit", "-q", "-m", "ci")
	run("branch", "dev")
	run("tag", "v1")
	return dir
}

const echoCI = "job:\n  script: [echo hi]\n"

type projectJSON struct {
	ID            int64  `json:"id"`
	Name          string `json:"name"`
	Registered    bool   `json:"registered"`
	RepoURL       string `json:"repo_url"`
	DefaultBranch string `json:"default_branch"`
	ConfigPath    string `json:"config_path"`
	Variables     []struct {
		Key       string `json:"key"`
		Value     string `json:"value"`
		Masked    bool   `json:"masked"`
		Protected bool   `json:"protected"`
	} `json:"variables"`
	WebhookSecret string `json:"webhook_secret"`
	Forge         struct {
		Kind     string `json:"kind"`
		URL      string `json:"url"`
		Repo     string `json:"repo"`
		TokenSet bool   `json:"token_set"`
	} `json:"forge"`
	Version int64 `json:"version"`
}

func TestProjectsAPI(t *testing.T) {
	e := newEnv(t, nil)
	resp, b := e.admin("POST", "/api/v1/projects", map[string]any{
		"name": "g/p", "repo_url": "https://example.com/g/p.git",
		"variables": []map[string]any{{"key": "TOKEN", "value": "s3cret-value", "masked": true, "protected": true}, {"key": "PLAIN", "value": "x"}},
		"forge":     map[string]any{"kind": "gitea", "url": "https://gitea.example.com/", "repo": "g/p", "token": "forge-token"},
	})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, b)
	}
	var p projectJSON
	e.decode(b, &p)
	if p.Name != "g/p" || !p.Registered || p.DefaultBranch != "main" || p.ConfigPath != ".gitlab-ci.yml" || len(p.WebhookSecret) < 16 ||
		p.Forge.URL != "https://gitea.example.com" || !p.Forge.TokenSet || len(p.Variables) != 2 || p.Variables[0].Value != "" {
		t.Errorf("created project = %s", b)
	}
	for _, secret := range []string{"s3cret-value", "forge-token"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("answer shows %q: %s", secret, b)
		}
	}
	// Read by URL-encoded path and by id; the secret only on request.
	for _, ref := range []string{"g%2Fp", fmt.Sprint(p.ID)} {
		resp, b := e.admin("GET", "/api/v1/projects/"+ref, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"g/p"`) || strings.Contains(string(b), p.WebhookSecret) {
			t.Errorf("GET project %s = %d %s", ref, resp.StatusCode, b)
		}
	}
	resp, b = e.admin("GET", "/api/v1/projects/g%2Fp/webhook_secret", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), p.WebhookSecret) {
		t.Errorf("GET webhook_secret = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": "g/p"}); resp.StatusCode != http.StatusConflict {
		t.Errorf("POST existing project = %d %s, want 409", resp.StatusCode, b)
	}

	// Validation names the field.
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{}, "name"},
		{map[string]any{"name": "nogroup"}, "name"},
		{map[string]any{"name": "g/x", "default_branch": "a b"}, "default_branch"},
		{map[string]any{"name": "g/x", "config_path": "../ci.yml"}, "config_path"},
		{map[string]any{"name": "g/x", "variables": []map[string]any{{"key": "A-B", "value": "v"}}}, "variables[0].key"},
		{map[string]any{"name": "g/x", "variables": []map[string]any{{"key": "A", "value": "short", "masked": true}}}, "variables[0].value"},
		{map[string]any{"name": "g/x", "forge": map[string]any{"kind": "svn"}}, "forge.kind"},
		{map[string]any{"name": "g/x", "forge": map[string]any{"kind": "gitea", "url": "https://g.example.com"}}, "forge.repo"},
		{map[string]any{"name": "g/x", "forge": map[string]any{"kind": "gitea", "repo": "o/r"}}, "forge.url"},
		{map[string]any{"name": "g/x", "webhook_secret": "short"}, "webhook_secret"},
	} {
		resp, b := e.admin("POST", "/api/v1/projects", tc.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"`+tc.field+`"`) {
			t.Errorf("POST %v = %d %s, want 400 for field %s", tc.body, resp.StatusCode, b, tc.field)
		}
	}

	// PATCH changes what it names, from the version given.
	resp, b = e.admin("PATCH", "/api/v1/projects/g%2Fp", map[string]any{"default_branch": "trunk", "forge": map[string]any{"kind": ""}, "version": p.Version})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH = %d %s", resp.StatusCode, b)
	}
	var up projectJSON
	e.decode(b, &up)
	if up.DefaultBranch != "trunk" || up.RepoURL != p.RepoURL || up.Forge.Kind != "" || len(up.Variables) != 2 || up.Version != p.Version+1 {
		t.Errorf("PATCHed project = %s", b)
	}
	if resp, b := e.admin("PATCH", "/api/v1/projects/g%2Fp", map[string]any{"repo_url": "x", "version": p.Version}); resp.StatusCode != http.StatusConflict {
		t.Errorf("PATCH from a stale version = %d %s, want 409", resp.StatusCode, b)
	}
	if resp, b := e.admin("PATCH", "/api/v1/projects/g%2Fp", map[string]any{"name": "g/q"}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PATCH name = %d %s, want 400", resp.StatusCode, b)
	}

	// Variables one by one.
	if resp, b := e.admin("PUT", "/api/v1/projects/g%2Fp/variables/NEW", map[string]any{"value": "v", "raw": true}); resp.StatusCode != http.StatusOK {
		t.Errorf("PUT variable = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.admin("DELETE", "/api/v1/projects/g%2Fp/variables/PLAIN", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("DELETE variable = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.admin("DELETE", "/api/v1/projects/g%2Fp/variables/NONE", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("DELETE unknown variable = %d %s, want 400", resp.StatusCode, b)
	}
	resp, b = e.admin("GET", "/api/v1/projects/g%2Fp/variables", nil)
	if resp.StatusCode != http.StatusOK || string(b) != `[{"key":"TOKEN","masked":true,"protected":true,"file":false,"raw":false},{"key":"NEW","masked":false,"protected":false,"file":false,"raw":true}]`+"\n" {
		t.Errorf("GET variables = %d %s", resp.StatusCode, b)
	}

	// Listed; deleted (settings only); 404 afterwards.
	resp, b = e.admin("GET", "/api/v1/projects", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"g/p"`) {
		t.Errorf("GET projects = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.admin("DELETE", "/api/v1/projects/g%2Fp", nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE project = %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.admin("GET", "/api/v1/projects/g%2Fp/webhook_secret", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("webhook_secret after DELETE = %d, want 404", resp.StatusCode)
	}
	if resp, b := e.admin("GET", "/api/v1/projects", nil); string(b) != "[]\n" {
		t.Errorf("GET projects after DELETE = %d %s, want []", resp.StatusCode, b)
	}
	if resp, b := e.admin("GET", "/api/v1/projects?all=true", nil); !strings.Contains(string(b), `"registered":false`) {
		t.Errorf("GET projects?all=true after DELETE = %d %s, want the unregistered row", resp.StatusCode, b)
	}
}

// TestProjectPipelines: a pipeline of a registered project takes its
// repository, default branch and variables: the protected ones only on
// the default branch and tags, below the pipeline's own.
func TestProjectPipelines(t *testing.T) {
	e := newEnv(t, nil)
	repo := gitRepo(t, map[string]string{".gitlab-ci.yml": "variables:\n  FROM_FILE: file\n  SHARED: file\n" + echoCI})
	_, tok := e.runner(nil)
	resp, b := e.admin("POST", "/api/v1/projects", map[string]any{
		"name": "g/p", "repo_url": repo,
		"variables": []map[string]any{
			{"key": "PROT", "value": "protected-value", "masked": true, "protected": true},
			{"key": "SHARED", "value": "project"}, {"key": "OVERRIDDEN", "value": "project"},
		},
	})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST project = %d %s", resp.StatusCode, b)
	}
	for _, tc := range []struct {
		ref      string
		wantProt bool
	}{{"", true}, {"dev", false}, {"v1", true}} {
		body := map[string]any{"project": "g/p", "variables": []map[string]any{{"key": "OVERRIDDEN", "value": "pipeline"}}}
		if tc.ref != "" {
			body["ref"] = tc.ref
		}
		resp, b := e.admin("POST", "/api/v1/pipelines", body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST pipeline (ref %q) = %d %s", tc.ref, resp.StatusCode, b)
		}
		var pv pipelineView
		e.decode(b, &pv)
		if err := e.c.advancePipeline(t.Context(), pv.ID); err != nil {
			t.Fatal(err)
		}
		jr := e.take(tok)
		vars := map[string]api.Variable{}
		for _, v := range jr.Variables {
			vars[v.Key] = v // the last of a name wins, as in the runner
		}
		_, prot := vars["PROT"]
		if prot != tc.wantProt || prot && !vars["PROT"].Masked {
			t.Errorf("ref %q: PROT given %v (%+v), want %v, masked", tc.ref, prot, vars["PROT"], tc.wantProt)
		}
		if vars["SHARED"].Value != "project" || vars["OVERRIDDEN"].Value != "pipeline" || vars["FROM_FILE"].Value != "file" {
			t.Errorf("ref %q: SHARED %q, OVERRIDDEN %q, FROM_FILE %q; want project, pipeline, file",
				tc.ref, vars["SHARED"].Value, vars["OVERRIDDEN"].Value, vars["FROM_FILE"].Value)
		}
		if tc.ref == "" && (pv.Ref != "main" || vars["CI_DEFAULT_BRANCH"].Value != "main") {
			t.Errorf("pipeline without a ref: ref %q, CI_DEFAULT_BRANCH %q; want the project's main", pv.Ref, vars["CI_DEFAULT_BRANCH"].Value)
		}
		e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess})
	}
}

func TestSchedulesAPI(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	repo := gitRepo(t, map[string]string{".gitlab-ci.yml": echoCI})
	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": "g/p", "repo_url": repo}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST project = %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.admin("POST", "/api/v1/projects/g%2Fnone/schedules", map[string]any{"cron": "* * * * *"}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("schedule of an unknown project = %d, want 404", resp.StatusCode)
	}
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{}, "cron"},
		{map[string]any{"cron": "61 * * * *"}, "cron"},
		{map[string]any{"cron": "0 0 30 2 *"}, "cron"},
		{map[string]any{"cron": "* * * * *", "cron_timezone": "Mars/Olympus"}, "cron_timezone"},
		{map[string]any{"cron": "* * * * *", "cron_timezone": "Local"}, "cron_timezone"},
		{map[string]any{"cron": "* * * * *", "ref": "a b"}, "ref"},
		{map[string]any{"cron": "* * * * *", "variables": []map[string]any{{"key": "A", "value": "v", "protected": true}}}, "variables[0].protected"},
	} {
		resp, b := e.admin("POST", "/api/v1/projects/g%2Fp/schedules", tc.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"`+tc.field+`"`) {
			t.Errorf("POST schedule %v = %d %s, want 400 for field %s", tc.body, resp.StatusCode, b, tc.field)
		}
	}
	resp, b := e.admin("POST", "/api/v1/projects/g%2Fp/schedules", map[string]any{
		"description": "nightly", "cron": "0 3 * * *", "cron_timezone": "Europe/Berlin",
		"variables": []map[string]any{{"key": "NIGHTLY", "value": "1"}},
	})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST schedule = %d %s", resp.StatusCode, b)
	}
	var sv scheduleView
	e.decode(b, &sv)
	// 03:00 in Berlin (UTC+1 in winter) is 02:00 UTC, the next day.
	if sv.Ref != "main" || !sv.Active || sv.NextRunAt == nil || *sv.NextRunAt != "2026-01-06T02:00:00Z" || len(sv.Variables) != 1 {
		t.Errorf("created schedule = %s", b)
	}
	path := fmt.Sprintf("/api/v1/projects/g%%2Fp/schedules/%d", sv.ID)
	resp, b = e.admin("PATCH", path, map[string]any{"cron": "30 12 * * *", "cron_timezone": "UTC"})
	e.decode(b, &sv)
	if resp.StatusCode != http.StatusOK || *sv.NextRunAt != "2026-01-05T12:30:00Z" || sv.Description != "nightly" {
		t.Errorf("PATCH schedule = %d %s", resp.StatusCode, b)
	}
	resp, b = e.admin("PATCH", path, map[string]any{"active": false})
	sv = scheduleView{}
	e.decode(b, &sv)
	if resp.StatusCode != http.StatusOK || sv.NextRunAt != nil || sv.Active {
		t.Errorf("PATCH active false = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.admin("PATCH", path, map[string]any{"cron_timezone": "Nowhere"}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "cron_timezone") {
		t.Errorf("PATCH bad zone = %d %s", resp.StatusCode, b)
	}
	// Play runs it now, inactive or not.
	resp, b = e.admin("POST", path+"/play", nil)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(b), `"source":"schedule"`) {
		t.Fatalf("play = %d %s", resp.StatusCode, b)
	}
	var pv pipelineView
	e.decode(b, &pv)
	resp, b = e.admin("GET", "/api/v1/projects/g%2Fp/schedules", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), fmt.Sprintf(`"last_pipeline_id":%d`, pv.ID)) {
		t.Errorf("GET schedules = %d %s, want last pipeline %d", resp.StatusCode, b, pv.ID)
	}
	if resp, _ := e.admin("GET", "/api/v1/projects/g%2Fp/schedules/999", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET unknown schedule = %d, want 404", resp.StatusCode)
	}
	if resp, _ := e.admin("DELETE", path, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE schedule = %d", resp.StatusCode)
	}
	if resp, _ := e.admin("GET", path, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET deleted schedule = %d, want 404", resp.StatusCode)
	}
}

// TestSchedulerTwoCoordinators: two coordinators on one database, their
// schedulers running at once, create exactly one pipeline per due time;
// runs missed while neither looked are made up by one pipeline.
func TestSchedulerTwoCoordinators(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	key, _ := secretbox.NewRandomKey()
	db := filepath.Join(t.TempDir(), "shared.db")
	coordinator := func() *env {
		st, err := sqlite.Open(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		return newEnv(t, func(c *Config) { c.Clock, c.Store, c.SecretKey = fc, st, key })
	}
	a, b := coordinator(), coordinator()
	repo := gitRepo(t, map[string]string{".gitlab-ci.yml": echoCI})
	if resp, body := a.admin("POST", "/api/v1/projects", map[string]any{"name": "g/p", "repo_url": repo,
		"variables": []map[string]any{{"key": "PROJECT_VAR", "value": "p"}}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST project = %d %s", resp.StatusCode, body)
	}
	if resp, body := b.admin("POST", "/api/v1/projects/g%2Fp/schedules", map[string]any{"cron": "*/10 * * * *",
		"variables": []map[string]any{{"key": "SCHEDULE_VAR", "value": "s"}}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST schedule = %d %s", resp.StatusCode, body)
	}
	tick := func() {
		var wg sync.WaitGroup
		for _, e := range []*env{a, b} {
			wg.Go(func() { e.c.runDueSchedules(t.Context()) })
		}
		wg.Wait()
	}
	pipelines := func() []store.Pipeline {
		ps, err := a.c.st.ListPipelines(t.Context(), store.PipelineFilter{Project: "g/p"})
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	tick() // nothing due yet
	if n := len(pipelines()); n != 0 {
		t.Fatalf("%d pipelines before the first due time", n)
	}
	for i := range 3 {
		fc.Advance(10 * time.Minute)
		tick()
		tick() // due no more
		if n := len(pipelines()); n != i+1 {
			t.Fatalf("after tick %d: %d pipelines, want %d", i+1, n, i+1)
		}
	}
	fc.Advance(2 * time.Hour) // 12 due times missed: one run
	tick()
	ps := pipelines()
	if len(ps) != 4 {
		t.Fatalf("after the missed runs: %d pipelines, want 4", len(ps))
	}
	for _, p := range ps {
		if p.Source != "schedule" || p.Ref != "main" {
			t.Errorf("pipeline %d: source %q ref %q, want schedule, main", p.ID, p.Source, p.Ref)
		}
	}
	scheds, err := a.c.st.ListSchedules(t.Context(), "g/p")
	if err != nil || len(scheds) != 1 {
		t.Fatalf("ListSchedules = %v, %v", scheds, err)
	}
	if s := scheds[0]; s.LastPipelineID != ps[3].ID || !s.NextRunAt.Equal(fc.Now().Add(10*time.Minute)) {
		t.Errorf("schedule: last pipeline %d next run %v; want %d, %v", s.LastPipelineID, s.NextRunAt, ps[3].ID, fc.Now().Add(10*time.Minute))
	}
	// The jobs get CI_PIPELINE_SOURCE=schedule, the schedule's and the
	// project's variables.
	_, tok := a.runner(nil)
	if err := a.c.advancePipeline(t.Context(), ps[0].ID); err != nil {
		t.Fatal(err)
	}
	jr := a.take(tok)
	var got []string
	for _, v := range jr.Variables {
		if slices.Contains([]string{"CI_PIPELINE_SOURCE", "SCHEDULE_VAR", "PROJECT_VAR"}, v.Key) {
			got = append(got, v.Key+"="+v.Value)
		}
	}
	slices.Sort(got)
	if want := []string{"CI_PIPELINE_SOURCE=schedule", "PROJECT_VAR=p", "SCHEDULE_VAR=s"}; !slices.Equal(got, want) {
		t.Errorf("job variables %v, want %v", got, want)
	}
}

// TestDeliveriesExpire: the reaper forgets webhook deliveries after a
// week.
func TestDeliveriesExpire(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	p, err := e.c.st.CreateProject(t.Context(), store.Project{Name: "g/p", CreatedAt: fc.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if isNew, _, err := e.c.st.ClaimDelivery(t.Context(), p.ID, "d", fc.Now()); err != nil || !isNew {
		t.Fatalf("ClaimDelivery = %v, %v", isNew, err)
	}
	fc.Advance(deliveryRetention - time.Minute)
	e.c.reapOnce(t.Context())
	if isNew, _, _ := e.c.st.ClaimDelivery(t.Context(), p.ID, "d", fc.Now()); isNew {
		t.Errorf("delivery forgotten before a week")
	}
	fc.Advance(deliveryRetention + time.Minute)
	e.c.reapOnce(t.Context())
	if isNew, _, _ := e.c.st.ClaimDelivery(t.Context(), p.ID, "d", fc.Now()); !isNew {
		t.Errorf("delivery remembered after a week")
	}
}
