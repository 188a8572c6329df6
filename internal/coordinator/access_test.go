package coordinator

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// tokenJSON is a project token as the admin API answers.
type tokenJSON struct {
	ID         int64   `json:"id"`
	Project    string  `json:"project"`
	Name       string  `json:"name"`
	Role       string  `json:"role"`
	LastUsedAt *string `json:"last_used_at"`
	ExpiresAt  *string `json:"expires_at"`
	Token      string  `json:"token"`
}

// createToken makes a token of project through the admin API.
func (e *env) createToken(project, name, role, expires string) tokenJSON {
	e.t.Helper()
	body := map[string]any{"name": name, "role": role}
	if expires != "" {
		body["expires_at"] = expires
	}
	resp, b := e.admin("POST", "/api/v1/projects/"+url.PathEscape(project)+"/tokens", body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("POST token of %s = %d %s", project, resp.StatusCode, b)
	}
	var tj tokenJSON
	e.decode(b, &tj)
	return tj
}

// accessFixture is two registered projects, each with a pipeline of a
// job and a manual job, and tokens of project g/a.
type accessFixture struct {
	e          *env
	fc         *clock.Fake
	pa, pb     pipelineView
	ja, jb     int64 // a job of each pipeline
	ma, mb     int64 // the manual job of each
	maintainer tokenJSON
	viewer     tokenJSON
	revoked    tokenJSON
	expired    tokenJSON
}

const accessCI = "build:\n  script: [echo hi]\ndeploy:\n  when: manual\n  script: [echo deploy]\n"

func newAccessFixture(t *testing.T) *accessFixture {
	fc := clock.NewFake(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	repo := gitRepo(t, map[string]string{".gitlab-ci.yml": accessCI})
	f := &accessFixture{e: e, fc: fc}
	for _, name := range []string{"g/a", "g/b"} {
		if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": name, "repo_url": repo}); resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST project %s = %d %s", name, resp.StatusCode, b)
		}
	}
	for _, p := range []struct {
		name        string
		pv          *pipelineView
		job, manual *int64
	}{{"g/a", &f.pa, &f.ja, &f.ma}, {"g/b", &f.pb, &f.jb, &f.mb}} {
		resp, b := e.admin("POST", "/api/v1/pipelines", map[string]any{"project": p.name})
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST pipeline of %s = %d %s", p.name, resp.StatusCode, b)
		}
		e.decode(b, p.pv)
		for _, j := range p.pv.Jobs {
			switch j.Name {
			case "build":
				*p.job = j.ID
			case "deploy":
				*p.manual = j.ID
			}
		}
		if *p.job == 0 || *p.manual == 0 {
			t.Fatalf("pipeline of %s: jobs %+v, want build and deploy", p.name, p.pv.Jobs)
		}
	}
	f.maintainer = e.createToken("g/a", "deployer", "maintainer", "")
	f.viewer = e.createToken("g/a", "dashboard", "viewer", "")
	f.revoked = e.createToken("g/a", "old", "maintainer", "")
	if resp, b := e.admin("DELETE", fmt.Sprintf("/api/v1/projects/g%%2Fa/tokens/%d", f.revoked.ID), nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE token = %d %s", resp.StatusCode, b)
	}
	f.expired = e.createToken("g/a", "short", "maintainer", fc.Now().Add(time.Hour).Format(time.RFC3339))
	// It works until it expires.
	if resp, b := e.do("GET", "/api/v1/pipelines", bearer(f.expired.Token), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/pipelines with a token not expired yet = %d %s", resp.StatusCode, b)
	}
	fc.Advance(2 * time.Hour)
	return f
}

func bearer(tok string) map[string]string {
	if tok == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + tok}
}

// Outcomes of a request in the access matrix.
const (
	allowed = "allowed" // served: 2xx, or a 409/400/404 of the request itself
	hidden  = "hidden"  // 404: another project's, as if none
	denied  = "denied"  // 403
	unauth  = "unauth"  // 401
)

func outcome(resp *http.Response, body []byte) string {
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return unauth
	case http.StatusForbidden:
		return denied
	case http.StatusNotFound:
		// A job without artifacts is 404 too, saying so.
		if strings.Contains(string(body), "has no") {
			return allowed
		}
		return hidden
	}
	return allowed
}

// TestProjectTokenAccess: each kind of credential on each class of
// admin endpoint, on its own project and on another.
func TestProjectTokenAccess(t *testing.T) {
	f := newAccessFixture(t)
	e := f.e
	type req struct {
		name         string
		method, path string
		body         any
	}
	own := []req{
		{"get pipeline", "GET", fmt.Sprintf("/api/v1/pipelines/%d", f.pa.ID), nil},
		{"get job", "GET", fmt.Sprintf("/api/v1/jobs/%d", f.ja), nil},
		{"job trace", "GET", fmt.Sprintf("/api/v1/jobs/%d/trace", f.ja), nil},
		{"job artifacts", "GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", f.ja), nil},
	}
	ownActs := []req{
		{"play job", "POST", fmt.Sprintf("/api/v1/jobs/%d/play", f.ma), nil},
		{"cancel job", "POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", f.ja), nil},
		{"retry job", "POST", fmt.Sprintf("/api/v1/jobs/%d/retry", f.ja), nil},
		{"cancel pipeline", "POST", fmt.Sprintf("/api/v1/pipelines/%d/cancel", f.pa.ID), nil},
		{"retry pipeline", "POST", fmt.Sprintf("/api/v1/pipelines/%d/retry", f.pa.ID), nil},
		{"create pipeline", "POST", "/api/v1/pipelines", map[string]any{"project": "g/a"}},
	}
	other := []req{
		{"get pipeline", "GET", fmt.Sprintf("/api/v1/pipelines/%d", f.pb.ID), nil},
		{"get job", "GET", fmt.Sprintf("/api/v1/jobs/%d", f.jb), nil},
		{"job trace", "GET", fmt.Sprintf("/api/v1/jobs/%d/trace", f.jb), nil},
		{"job artifacts", "GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", f.jb), nil},
	}
	otherActs := []req{
		{"play job", "POST", fmt.Sprintf("/api/v1/jobs/%d/play", f.mb), nil},
		{"cancel job", "POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", f.jb), nil},
		{"retry job", "POST", fmt.Sprintf("/api/v1/jobs/%d/retry", f.jb), nil},
		{"cancel pipeline", "POST", fmt.Sprintf("/api/v1/pipelines/%d/cancel", f.pb.ID), nil},
		{"retry pipeline", "POST", fmt.Sprintf("/api/v1/pipelines/%d/retry", f.pb.ID), nil},
		{"create pipeline", "POST", "/api/v1/pipelines", map[string]any{"project": "g/b"}},
	}
	adminOnly := []req{
		{"list projects", "GET", "/api/v1/projects", nil},
		{"get own project", "GET", "/api/v1/projects/g%2Fa", nil},
		{"change own project", "PATCH", "/api/v1/projects/g%2Fa", map[string]any{"default_branch": "main"}},
		{"own project's variables", "GET", "/api/v1/projects/g%2Fa/variables", nil},
		{"own project's webhook secret", "GET", "/api/v1/projects/g%2Fa/webhook_secret", nil},
		{"own project's schedules", "GET", "/api/v1/projects/g%2Fa/schedules", nil},
		{"own project's tokens", "GET", "/api/v1/projects/g%2Fa/tokens", nil},
		{"add a token", "POST", "/api/v1/projects/g%2Fa/tokens", map[string]any{"name": "x", "role": "maintainer"}},
		{"runners", "GET", "/api/v1/runners", nil},
		{"submit a job", "POST", "/api/v1/jobs", map[string]any{"name": "x", "project": "g/a", "script": []string{"true"}}},
	}
	type class struct {
		name string
		reqs []req
	}
	classes := []class{{"own read", own}, {"own action", ownActs}, {"other read", other}, {"other action", otherActs}, {"admin only", adminOnly}}
	for _, tc := range []struct {
		cred  string
		token string
		want  map[string]string // class -> outcome
	}{
		{"viewer of g/a", f.viewer.Token, map[string]string{
			"own read": allowed, "own action": denied, "other read": hidden, "other action": denied, "admin only": denied}},
		{"maintainer of g/a", f.maintainer.Token, map[string]string{
			"own read": allowed, "own action": allowed, "other read": hidden, "other action": hidden, "admin only": denied}},
		{"revoked", f.revoked.Token, map[string]string{
			"own read": denied, "own action": denied, "other read": denied, "other action": denied, "admin only": denied}},
		{"expired", f.expired.Token, map[string]string{
			"own read": denied, "own action": denied, "other read": denied, "other action": denied, "admin only": denied}},
		{"made up", "drp_" + strings.Repeat("x", 32), map[string]string{
			"own read": denied, "own action": denied, "other read": denied, "other action": denied, "admin only": denied}},
		{"none", "", map[string]string{
			"own read": unauth, "own action": unauth, "other read": unauth, "other action": unauth, "admin only": unauth}},
		// The admin last: its actions change what the others see.
		{"admin", e.c.AdminToken(), map[string]string{
			"own read": allowed, "own action": allowed, "other read": allowed, "other action": allowed, "admin only": allowed}},
	} {
		for _, cl := range classes {
			for _, rq := range cl.reqs {
				resp, b := e.do(rq.method, rq.path, bearer(tc.token), rq.body)
				if got := outcome(resp, b); got != tc.want[cl.name] {
					t.Errorf("%s: %s (%s %s) = %d %s: %s, want %s", tc.cred, rq.name, rq.method, rq.path, resp.StatusCode, b, got, tc.want[cl.name])
				}
			}
		}
	}
	if n := e.errorLogs.Load(); n != 0 {
		t.Errorf("%d errors logged", n)
	}
}

// TestProjectTokenLists: a project token lists its project's pipelines
// and jobs only, and runs pipelines in its own name.
func TestProjectTokenLists(t *testing.T) {
	f := newAccessFixture(t)
	e := f.e
	for _, tok := range []tokenJSON{f.viewer, f.maintainer} {
		for _, q := range []string{"", "?project=g%2Fa", "?project=g%2Fb"} {
			resp, b := e.do("GET", "/api/v1/pipelines"+q, bearer(tok.Token), nil)
			var ps []pipelineView
			e.decode(b, &ps)
			wantN := 1
			if strings.Contains(q, "g%2Fb") {
				wantN = 0
			}
			if resp.StatusCode != http.StatusOK || len(ps) != wantN || wantN == 1 && ps[0].ID != f.pa.ID {
				t.Errorf("%s: GET /api/v1/pipelines%s = %d %s, want pipeline %d only", tok.Role, q, resp.StatusCode, b, f.pa.ID)
			}
			resp, b = e.do("GET", "/api/v1/jobs"+q, bearer(tok.Token), nil)
			var js []jobView
			e.decode(b, &js)
			for _, j := range js {
				if j.Project != "g/a" {
					t.Errorf("%s: GET /api/v1/jobs%s lists job %d of %s", tok.Role, q, j.ID, j.Project)
				}
			}
			if resp.StatusCode != http.StatusOK || len(js) != 2*wantN {
				t.Errorf("%s: GET /api/v1/jobs%s = %d, %d jobs; want %d", tok.Role, q, resp.StatusCode, len(js), 2*wantN)
			}
		}
	}
	// The admin sees both.
	resp, b := e.admin("GET", "/api/v1/pipelines", nil)
	var all []pipelineView
	e.decode(b, &all)
	if resp.StatusCode != http.StatusOK || len(all) != 2 {
		t.Errorf("admin: GET /api/v1/pipelines = %d, %d pipelines; want 2", resp.StatusCode, len(all))
	}

	// A maintainer's pipeline is of its project (the default), says who
	// ran it, and takes no repo_url of the caller's.
	resp, b = e.do("POST", "/api/v1/pipelines", bearer(f.maintainer.Token), map[string]any{"triggered_by": "someone else"})
	var pv pipelineView
	e.decode(b, &pv)
	if resp.StatusCode != http.StatusCreated || pv.Project != "g/a" || pv.TriggeredBy != "deployer" {
		t.Errorf("maintainer: POST /api/v1/pipelines = %d %s; want 201 of g/a triggered by deployer", resp.StatusCode, b)
	}
	resp, b = e.do("POST", "/api/v1/pipelines", bearer(f.maintainer.Token), map[string]any{"repo_url": e.dir})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("maintainer: POST /api/v1/pipelines with a repo_url = %d %s, want 400", resp.StatusCode, b)
	}

	// The list of tokens shows no token or hash, and when each was used.
	resp, b = e.admin("GET", "/api/v1/projects/g%2Fa/tokens", nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "drp_") || strings.Contains(string(b), "hash") {
		t.Fatalf("GET tokens = %d %s", resp.StatusCode, b)
	}
	var ts []tokenJSON
	e.decode(b, &ts)
	byName := map[string]tokenJSON{}
	for _, tj := range ts {
		byName[tj.Name] = tj
	}
	if _, ok := byName["old"]; ok || len(ts) != 3 {
		t.Errorf("GET tokens = %s, want deployer, dashboard and short (not the revoked one)", b)
	}
	if byName["deployer"].LastUsedAt == nil || byName["short"].ExpiresAt == nil {
		t.Errorf("GET tokens = %s, want deployer's last_used_at and short's expires_at", b)
	}

	// Bad requests, and another project's token id.
	for _, tc := range []struct {
		path string
		body map[string]any
		want int
	}{
		{"/api/v1/projects/g%2Fa/tokens", map[string]any{"name": "", "role": "viewer"}, http.StatusBadRequest},
		{"/api/v1/projects/g%2Fa/tokens", map[string]any{"name": "x", "role": "owner"}, http.StatusBadRequest},
		{"/api/v1/projects/g%2Fa/tokens", map[string]any{"name": "x", "role": "viewer", "expires_at": "tomorrow"}, http.StatusBadRequest},
		{"/api/v1/projects/g%2Fa/tokens", map[string]any{"name": "x", "role": "viewer", "expires_at": "2020-01-01T00:00:00Z"}, http.StatusBadRequest},
		{"/api/v1/projects/g%2Fnone/tokens", map[string]any{"name": "x", "role": "viewer"}, http.StatusNotFound},
	} {
		if resp, b := e.admin("POST", tc.path, tc.body); resp.StatusCode != tc.want {
			t.Errorf("POST %s %v = %d %s, want %d", tc.path, tc.body, resp.StatusCode, b, tc.want)
		}
	}
	if resp, b := e.admin("DELETE", fmt.Sprintf("/api/v1/projects/g%%2Fb/tokens/%d", f.viewer.ID), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("DELETE g/a's token through g/b = %d %s, want 404", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/api/v1/pipelines", bearer(f.viewer.Token), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer token after a DELETE through another project = %d %s, want it still working", resp.StatusCode, b)
	}

	// Unregistering the project ends its tokens.
	if resp, b := e.admin("DELETE", "/api/v1/projects/g%2Fa", nil); resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE project = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/api/v1/pipelines", bearer(f.viewer.Token), nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("token of a deleted project = %d %s, want 403", resp.StatusCode, b)
	}
}
