package coordinator

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store/postgres"
)

// The red-team probes (docs/SECURITY.md): what an attacker sends to the
// coordinator's HTTP surface, and the answer that is right, one row each,
// run against a real coordinator over loopback HTTP on each job store.
// The counts per category are what docs/SECURITY.md's table reports.
//
//	go test -count=1 -run 'TestProbes' ./internal/coordinator/

// Probe categories, as docs/SECURITY.md names them.
const (
	catRedirect = "open redirect"
	catSignIn   = "sign-in"
	catCSRF     = "CSRF"
	catXSS      = "XSS"
	catToken    = "token crossing"
	catArtifact = "artifact path"
	catOversize = "oversized body"
	catRange    = "Content-Range"
	catJSON     = "malformed JSON"
	catPage     = "pagination"
)

// probe is one row: what is sent, and the answer that is right.
type probe struct {
	cat  string
	sent string // what is sent
	want string // the right answer
	run  func(fx *probeFixture) error
}

// probeStores are the job stores the probes run on.
var probeStores = []struct {
	name string
	open func(t *testing.T, mod func(*Config)) *env
}{
	{"sqlite", func(t *testing.T, mod func(*Config)) *env { return newEnv(t, mod) }},
	{"postgres", func(t *testing.T, mod func(*Config)) *env {
		st, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatalf("postgres.Open = %v", err)
		}
		return newEnv(t, func(c *Config) { c.Store = st; mod(c) })
	}},
}

// probeMaxArtifact is the artifact size cap the probes' coordinator has.
const probeMaxArtifact = 1 << 20

func TestProbes(t *testing.T) {
	for _, s := range probeStores {
		t.Run(s.name, func(t *testing.T) {
			e := s.open(t, func(c *Config) { c.MaxArtifactSize = probeMaxArtifact })
			fx := newProbeFixture(t, e)
			tried, right := map[string]int{}, map[string]int{}
			var cats []string
			for _, p := range probes() {
				if tried[p.cat] == 0 {
					cats = append(cats, p.cat)
				}
				tried[p.cat]++
				if err := p.run(fx); err != nil {
					t.Errorf("%s: %s: %v\n\twant %s", p.cat, p.sent, err, p.want)
					continue
				}
				right[p.cat]++
			}
			total := 0
			for _, c := range cats {
				t.Logf("%-16s tried %3d, answered right %3d", c, tried[c], right[c])
				total += tried[c]
			}
			t.Logf("%-16s tried %3d", "all", total)
		})
	}
}

// probeFixture is the coordinator the probes attack, with what they need
// of it.
type probeFixture struct {
	t  *testing.T
	e  *env
	hc *http.Client // follows no redirect, keeps no cookie

	admin, viewer, reg string
	runnerID           int64
	runnerTok          string
	// a and b run on runnerTok; a's trace has aTrace bytes.
	a, b *api.JobResponse
	// done succeeded, with an archive artifact.
	done *api.JobResponse
	// pending waits in the queue: the target of refused cancels.
	pending int64
	// xss failed on runner xssRunner with payloads in every field a
	// page shows; xssLive runs on it, with the payload name.
	xss, xssLive  int64
	xssRunner     int64
	xssSize       int64
	adminSession  string
	adminCSRF     string
	viewerSession string
	viewerCSRF    string
	jobs          int // jobs in the store once set up
	// otherMaintainer and otherViewer are tokens of project probe/other,
	// which none of the jobs is of.
	otherMaintainer, otherViewer string
}

const aTrace = "0123456789"

var probeCSRFRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// xssInputs are the payloads the fixture puts where a page shows what a
// user or a runner sent. Each carries a marker alert(N) so that a probe
// can tell that the input reached the view.
var xssInputs = struct {
	name, stage, image, tag, desc, version, executor, systemID, logPlain, logANSI, logSection, artifact string
}{
	name:       `<img src=x onerror=alert(101)>`,
	stage:      `"><svg onload=alert(102)>`,
	image:      `<iframe src=javascript:alert(103)>`,
	tag:        `<b onmouseover=alert(104)>`,
	desc:       `<script>alert(105)</script>`,
	version:    `<script>alert(106)</script>`,
	executor:   `<img src=x onerror=alert(107)>`,
	systemID:   `<svg/onload=alert(108)>`,
	logPlain:   `<script>alert(109)</script>`,
	logANSI:    "\x1b[31m<img src=x onerror=alert(110)>\x1b[0m",
	logSection: `<svg/onload=alert(111)>`,
	artifact:   `<img src=x onerror=alert(112)>.zip`,
}

func newProbeFixture(t *testing.T, e *env) *probeFixture {
	t.Helper()
	fx := &probeFixture{
		t: t, e: e, admin: e.c.AdminToken(), viewer: e.c.ViewerToken(), reg: e.c.RegistrationToken(),
		hc: &http.Client{
			Transport:     e.srv.Client().Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	fx.runnerID, fx.runnerTok = e.runner(map[string]any{"description": "probe runner"})

	fx.a = e.running(fx.runnerTok, map[string]any{"name": "a"})
	if resp := e.patch(fx.a.ID, fx.a.Token, "0-9", []byte(aTrace)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH a = %d", resp.StatusCode)
	}
	fx.b = e.running(fx.runnerTok, map[string]any{"name": "b"})
	fx.done = e.running(fx.runnerTok, map[string]any{"name": "done"})
	if resp, b := e.upload(fx.done.ID, fx.done.Token, "", []byte("PK archive")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload done = %d %s", resp.StatusCode, b)
	}
	e.succeed(fx.done)

	// The XSS job: payloads in the submission, the runner's description,
	// what its manager reports, the log, the artifact's name and the
	// failure reason.
	x := xssInputs
	var xr string
	fx.xssRunner, xr = e.runner(map[string]any{"description": x.desc, "tag_list": []string{x.tag, "xss"}})
	e.submit(map[string]any{"name": x.name, "stage": x.stage, "image": x.image, "tags": []string{x.tag, "xss"}})
	takeAs := func() *api.JobResponse {
		req := api.JobRequest{Token: xr, SystemID: x.systemID, Info: api.VersionInfo{
			Name: "gitlab-runner", Version: x.version, Executor: x.executor, Platform: x.executor, Architecture: x.executor,
			Features: api.FeaturesInfo{Image: true},
		}}
		resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: xr}, req)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("xss jobs/request = %d %s", resp.StatusCode, b)
		}
		var jr api.JobResponse
		e.decode(b, &jr)
		return &jr
	}
	xj := takeAs()
	fx.xss = xj.ID
	log := x.logPlain + "\n" + x.logANSI + "\nsection_start:1:s1\r\x1b[0K" + x.logSection + "\nsection_end:2:s1\r\x1b[0K\n"
	fx.xssSize = int64(len(log))
	if resp := e.patch(xj.ID, xj.Token, fmt.Sprintf("0-%d", len(log)-1), []byte(log)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH xss = %d", resp.StatusCode)
	}
	ct, body := multipartBody(t, "file", x.artifact, []byte("PK"))
	if resp, b := e.do("POST", fmt.Sprintf("/api/v4/jobs/%d/artifacts", xj.ID), map[string]string{"Content-Type": ct, hdrJobToken: xj.Token}, body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload xss = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.put(xj.ID, xj.Token, api.UpdateJobRequest{Token: xj.Token, State: api.StateFailed, FailureReason: `<script>alert(113)</script>`}); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT xss failed = %d %s", resp.StatusCode, b)
	}
	e.submit(map[string]any{"name": x.name, "tags": []string{"xss"}})
	fx.xssLive = takeAs().ID
	if st := fx.jobStatus(fx.xss); st != "failed" {
		t.Fatalf("xss job is %s, want failed", st)
	}

	fx.pending = e.submit(map[string]any{"name": "pending", "tags": []string{"nobody"}}).ID
	_, list, err := fx.send(sent{method: "GET", path: "/api/v1/jobs?limit=1000", hdr: fx.bearer(fx.admin)})
	var all []json.RawMessage
	if err != nil || json.Unmarshal(list, &all) != nil {
		t.Fatalf("list jobs: %v %s", err, list)
	}
	fx.jobs = len(all)

	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": "probe/other", "repo_url": "https://example.com/probe/other.git"}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST project = %d %s", resp.StatusCode, b)
	}
	fx.otherMaintainer = e.createToken("probe/other", "probe maintainer", "maintainer", "").Token
	fx.otherViewer = e.createToken("probe/other", "probe viewer", "viewer", "").Token

	fx.adminSession, fx.adminCSRF = fx.signIn(fx.admin)
	fx.viewerSession, fx.viewerCSRF = fx.signIn(fx.viewer)
	return fx
}

// signIn signs in with tok and returns the session cookie's value and its
// CSRF token.
func (fx *probeFixture) signIn(tok string) (session, csrf string) {
	fx.t.Helper()
	resp, _, err := fx.send(sent{method: "GET", path: "/login?" + url.Values{"token": {tok}}.Encode()})
	if err != nil {
		fx.t.Fatal(err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "drover_session" {
			session = c.Value
		}
	}
	if session == "" {
		fx.t.Fatalf("sign-in = %d without a session cookie", resp.StatusCode)
	}
	_, page, err := fx.send(sent{method: "GET", path: "/runners", cookie: "drover_session=" + session})
	if err != nil {
		fx.t.Fatal(err)
	}
	m := probeCSRFRE.FindSubmatch(page)
	if m == nil {
		fx.t.Fatalf("runners page has no CSRF token:\n%s", page)
	}
	return session, string(m[1])
}

// sent is one request.
type sent struct {
	method, path string
	hdr          map[string]string
	cookie       string // the Cookie header
	body         []byte
	chunked      bool // no Content-Length
}

func (fx *probeFixture) send(s sent) (*http.Response, []byte, error) {
	var rd io.Reader
	if s.body != nil {
		rd = bytes.NewReader(s.body)
		if s.chunked {
			rd = io.MultiReader(rd) // hides the length
		}
	}
	req, err := http.NewRequestWithContext(fx.t.Context(), s.method, fx.e.srv.URL+s.path, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range s.hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if s.cookie != "" {
		req.Header.Set("Cookie", s.cookie)
	}
	resp, err := fx.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", s.method, s.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, b, fmt.Errorf("%s %s: read body: %w", s.method, s.path, err)
	}
	return resp, b, nil
}

// check is a property of an answer.
type check func(resp *http.Response, body []byte) error

// expect sends s and checks its answer.
func (fx *probeFixture) expect(s sent, checks ...check) error {
	resp, body, err := fx.send(s)
	if err != nil {
		return err
	}
	for _, c := range checks {
		if err := c(resp, body); err != nil {
			return fmt.Errorf("%s %s = %d: %w (body %.300q)", s.method, s.path, resp.StatusCode, err, body)
		}
	}
	return nil
}

func code(want ...int) check {
	return func(resp *http.Response, _ []byte) error {
		if !slices.Contains(want, resp.StatusCode) {
			return fmt.Errorf("status %d, want %v", resp.StatusCode, want)
		}
		return nil
	}
}

// onSite: no Location, or one on this site.
func onSite(resp *http.Response, _ []byte) error {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	u, err := url.Parse(loc)
	if err != nil || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`) ||
		u.Scheme != "" || u.Host != "" || strings.ContainsAny(loc, "\\\t\r\n") {
		return fmt.Errorf("Location %q leaves the site", loc)
	}
	return nil
}

func location(want string) check {
	return func(resp *http.Response, _ []byte) error {
		if got := resp.Header.Get("Location"); got != want {
			return fmt.Errorf("Location %q, want %q", got, want)
		}
		return nil
	}
}

func locationPrefix(want string) check {
	return func(resp *http.Response, _ []byte) error {
		if got := resp.Header.Get("Location"); !strings.HasPrefix(got, want) {
			return fmt.Errorf("Location %q, want %s...", got, want)
		}
		return nil
	}
}

// noSession: no session cookie is set.
func noSession(resp *http.Response, _ []byte) error {
	for _, c := range resp.Cookies() {
		if c.Name == "drover_session" && c.MaxAge >= 0 && c.Value != "" {
			return errors.New("a session cookie was set")
		}
	}
	return nil
}

func header(name, want string) check {
	return func(resp *http.Response, _ []byte) error {
		if got := resp.Header.Get(name); got != want {
			return fmt.Errorf("%s %q, want %q", name, got, want)
		}
		return nil
	}
}

func lacks(s string) check {
	return func(_ *http.Response, body []byte) error {
		if bytes.Contains(body, []byte(s)) {
			return fmt.Errorf("body holds %q", s)
		}
		return nil
	}
}

func has(s string) check {
	return func(_ *http.Response, body []byte) error {
		if !bytes.Contains(body, []byte(s)) {
			return fmt.Errorf("body lacks %q", s)
		}
		return nil
	}
}

// apiError: the body is the APIs' JSON error, naming field if not "".
func apiError(field string) check {
	return func(resp *http.Response, body []byte) error {
		var e struct{ Error, Field string }
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			return errors.New("body is not a JSON error")
		}
		if field != "" && e.Field != field {
			return fmt.Errorf("error on field %q, want %q", e.Field, field)
		}
		return nil
	}
}

// jobCount: a GET /api/v1/jobs?limit=N answer lists n jobs.
func jobCount(n int) check {
	return func(_ *http.Response, body []byte) error {
		var l []json.RawMessage
		if err := json.Unmarshal(body, &l); err != nil {
			return fmt.Errorf("body is not a JSON list: %v", err)
		}
		if len(l) != n {
			return fmt.Errorf("%d jobs, want %d", len(l), n)
		}
		return nil
	}
}

// after is a check of the coordinator's state after the answer.
func (fx *probeFixture) after(what string, ok func() (bool, string)) check {
	return func(*http.Response, []byte) error {
		if good, got := ok(); !good {
			return fmt.Errorf("after it, %s: %s", what, got)
		}
		return nil
	}
}

func (fx *probeFixture) jobStatus(id int64) string {
	_, b, err := fx.send(sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d", id), hdr: fx.bearer(fx.admin)})
	if err != nil {
		return err.Error()
	}
	var j jobView
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Sprintf("%q", b)
	}
	return j.Status
}

// unchanged: the pending job still waits, job a still runs with its
// trace, the probe runner is not paused, and no job was added.
func (fx *probeFixture) unchanged() check {
	return fx.after("the state changed", func() (bool, string) {
		var rn struct{ Paused bool }
		resp, b, err := fx.send(sent{method: "GET", path: fmt.Sprintf("/api/v1/runners/%d", fx.runnerID), hdr: fx.bearer(fx.admin)})
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &rn) != nil {
			return false, fmt.Sprintf("runner: %v %s", err, b)
		}
		_, list, _ := fx.send(sent{method: "GET", path: "/api/v1/jobs?limit=1000", hdr: fx.bearer(fx.admin)})
		var jobs []json.RawMessage
		json.Unmarshal(list, &jobs)
		_, tr, _ := fx.send(sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d/trace", fx.a.ID), hdr: fx.bearer(fx.admin)})
		p, a := fx.jobStatus(fx.pending), fx.jobStatus(fx.a.ID)
		got := fmt.Sprintf("pending job %s, job a %s with trace %q, runner paused %v, %d jobs", p, a, tr, rn.Paused, len(jobs))
		return p == "pending" && a == "running" && string(tr) == aTrace && !rn.Paused && len(jobs) == fx.jobs, got
	})
}

func (fx *probeFixture) bearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

func form(v url.Values) []byte { return []byte(v.Encode()) }

var formHdr = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

func withHdr(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// loginGET is GET /login with token and next.
func loginGET(token, next string) sent {
	v := url.Values{}
	if token != "" {
		v.Set("token", token)
	}
	if next != "" {
		v.Set("next", next)
	}
	return sent{method: "GET", path: "/login?" + v.Encode()}
}

// loginForm fetches the login form and returns its login cookie and CSRF
// value.
func (fx *probeFixture) loginForm() (cookie, csrf string, err error) {
	resp, page, err := fx.send(loginGET("", ""))
	if err != nil {
		return "", "", err
	}
	for _, c := range resp.Cookies() {
		if c.Name == "drover_login" {
			cookie = c.Value
		}
	}
	m := probeCSRFRE.FindSubmatch(page)
	if cookie == "" || m == nil {
		return "", "", fmt.Errorf("login form = %d without its cookie or CSRF field", resp.StatusCode)
	}
	return cookie, string(m[1]), nil
}

// postLogin posts the login form with a fresh login cookie and its CSRF
// value.
func (fx *probeFixture) postLogin(token, next string, checks ...check) error {
	cookie, csrf, err := fx.loginForm()
	if err != nil {
		return err
	}
	return fx.expect(sent{method: "POST", path: "/login", hdr: formHdr, cookie: "drover_login=" + cookie,
		body: form(url.Values{"token": {token}, "next": {next}, "csrf": {csrf}})}, checks...)
}

// forgeSession signs a session cookie for role with key, as the web UI
// signs them with the admin token.
func forgeSession(key, exp, role, nonce string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("drover web"))
	for _, p := range []string{"session", exp, role, nonce} {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return exp + "." + role + "." + nonce + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sessionParts splits a session cookie value.
func sessionParts(v string) []string { return strings.Split(v, ".") }

func probes() []probe {
	var ps []probe
	ps = append(ps, redirectProbes()...)
	ps = append(ps, signInProbes()...)
	ps = append(ps, csrfProbes()...)
	ps = append(ps, xssProbes()...)
	ps = append(ps, tokenProbes()...)
	ps = append(ps, artifactProbes()...)
	ps = append(ps, oversizeProbes()...)
	ps = append(ps, rangeProbes()...)
	ps = append(ps, jsonProbes()...)
	ps = append(ps, pageProbes()...)
	return ps
}

func redirectProbes() []probe {
	var ps []probe
	// next values the sign-in refuses outright.
	for _, next := range []string{
		"//evil.example/x", "https://evil.example/", "http:evil.example", `/\evil.example`, `\\evil.example`,
		"javascript:alert(1)", "///evil.example", "/\t/evil.example", " //evil.example", "jobs",
	} {
		ps = append(ps, probe{catRedirect, fmt.Sprintf("GET /login?token=<admin>&next=%q", next), "400, no Location, no session",
			func(fx *probeFixture) error {
				return fx.expect(loginGET(fx.admin, next), code(400), location(""), noSession)
			}})
	}
	// next values that are paths here, however odd.
	for _, next := range []string{"/%2F%2Fevil.example", "/.//evil.example", "/jobs/..//evil.example"} {
		ps = append(ps, probe{catRedirect, fmt.Sprintf("GET /login?token=<admin>&next=%q", next), "303 to a path on this site",
			func(fx *probeFixture) error {
				return fx.expect(loginGET(fx.admin, next), code(303), onSite)
			}})
	}
	ps = append(ps,
		probe{catRedirect, `POST /login (valid form) with next="//evil.example"`, "400, no Location, no session",
			func(fx *probeFixture) error {
				return fx.postLogin(fx.admin, "//evil.example", code(400), location(""), noSession)
			}},
		probe{catRedirect, "GET /jobs?x=//evil.example without a session", "303 to /login?next=..., on this site",
			func(fx *probeFixture) error {
				return fx.expect(sent{method: "GET", path: "/jobs?x=//evil.example"}, code(303), locationPrefix("/login?next="), onSite)
			}},
		probe{catRedirect, "GET //evil.example/ (the path)", "a redirect on this site or 404",
			func(fx *probeFixture) error {
				return fx.expect(sent{method: "GET", path: "//evil.example/"}, code(301, 307, 308, 303, 404), onSite)
			}},
		probe{catRedirect, "GET / with Host: evil.example", "303 to /jobs (no host in Location)",
			func(fx *probeFixture) error {
				return fx.expect(sent{method: "GET", path: "/", hdr: map[string]string{"Host": "evil.example"}}, code(303), location("/jobs"))
			}},
	)
	return ps
}

func signInProbes() []probe {
	refused := func(sent string, tok func(fx *probeFixture) string) probe {
		return probe{catSignIn, "GET /login?token=" + sent, "403 form, no session", func(fx *probeFixture) error {
			return fx.expect(loginGET(tok(fx), "/jobs"), code(403), noSession, has(`name="token"`))
		}}
	}
	page := func(sent, want string, s func(fx *probeFixture) sent, checks ...check) probe {
		return probe{catSignIn, sent, want, func(fx *probeFixture) error { return fx.expect(s(fx), checks...) }}
	}
	jobsWith := func(cookie string) sent { return sent{method: "GET", path: "/jobs", cookie: cookie} }
	toLogin := []check{code(303), locationPrefix("/login?next=")}
	api := func(hdr map[string]string) sent { return sent{method: "GET", path: "/api/v1/jobs", hdr: hdr} }
	ps := []probe{
		refused("wrong", func(*probeFixture) string { return "wrong" }),
		refused("<admin token minus its last character>", func(fx *probeFixture) string { return fx.admin[:len(fx.admin)-1] }),
		refused("<admin token>x", func(fx *probeFixture) string { return fx.admin + "x" }),
		refused("<admin token, upper case>", func(fx *probeFixture) string { return strings.ToUpper(fx.admin) }),
		refused("' '+<admin token>", func(fx *probeFixture) string { return " " + fx.admin }),
		refused("<admin token>+NUL", func(fx *probeFixture) string { return fx.admin + "\x00" }),
		refused("<runner token>", func(fx *probeFixture) string { return fx.runnerTok }),
		refused("<job token>", func(fx *probeFixture) string { return fx.a.Token }),
		refused("<registration token>", func(fx *probeFixture) string { return fx.reg }),
		refused("<session cookie value>", func(fx *probeFixture) string { return fx.adminSession }),
		page("GET /login?token= (empty)", "200 form, no session",
			func(*probeFixture) sent { return loginGET("", "") }, code(200), noSession),
		page("GET /login?token=<viewer token>", "303, a session (read-only)",
			func(fx *probeFixture) sent { return loginGET(fx.viewer, "/jobs") }, code(303), location("/jobs")),
		page("GET /login?token=<admin token>", "303; session cookie HttpOnly, SameSite=Strict, without the token; no-referrer, no-store",
			func(fx *probeFixture) sent { return loginGET(fx.admin, "/jobs") }, code(303),
			header("Referrer-Policy", "no-referrer"), header("Cache-Control", "no-store"),
			func(resp *http.Response, _ []byte) error {
				for _, c := range resp.Cookies() {
					if c.Name == "drover_session" {
						if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
							return fmt.Errorf("session cookie %+v", c)
						}
						if strings.Contains(c.Value, resp.Request.URL.Query().Get("token")) {
							return errors.New("the session cookie holds the token")
						}
						return nil
					}
				}
				return errors.New("no session cookie")
			}),
		{catSignIn, "POST /login without the login cookie", "403, no session", func(fx *probeFixture) error {
			_, csrf, err := fx.loginForm()
			if err != nil {
				return err
			}
			return fx.expect(sent{method: "POST", path: "/login", hdr: formHdr, body: form(url.Values{"token": {fx.admin}, "csrf": {csrf}})}, code(403), noSession)
		}},
		{catSignIn, "POST /login with a CSRF value not the login cookie's", "403, no session", func(fx *probeFixture) error {
			cookie, _, err := fx.loginForm()
			if err != nil {
				return err
			}
			return fx.expect(sent{method: "POST", path: "/login", hdr: formHdr, cookie: "drover_login=" + cookie,
				body: form(url.Values{"token": {fx.admin}, "csrf": {"x" + cookie}})}, code(403), noSession)
		}},
		{catSignIn, "POST /login (valid form) with a wrong token", "403, no session", func(fx *probeFixture) error {
			return fx.postLogin("wrong", "/jobs", code(403), noSession)
		}},
		{catSignIn, "POST /login (valid form) with the admin token", "303 to next, a session", func(fx *probeFixture) error {
			return fx.postLogin(fx.admin, "/jobs/1", code(303), location("/jobs/1"), func(resp *http.Response, _ []byte) error {
				if noSession(resp, nil) == nil {
					return errors.New("no session cookie")
				}
				return nil
			})
		}},
		page("GET /jobs with a session cookie of the admin", "200",
			func(fx *probeFixture) sent { return jobsWith("drover_session=" + fx.adminSession) }, code(200)),
		page("GET /jobs with cookie 99999999999.a.x.y (forged)", "303 to the login form",
			func(*probeFixture) sent { return jobsWith("drover_session=99999999999.a.x.y") }, toLogin...),
		page("GET /jobs with the viewer's session, role changed to admin", "303 to the login form",
			func(fx *probeFixture) sent {
				p := sessionParts(fx.viewerSession)
				return jobsWith("drover_session=" + strings.Join([]string{p[0], "a", p[2], p[3]}, "."))
			}, toLogin...),
		page("GET /jobs with the admin's session, expiry moved later", "303 to the login form",
			func(fx *probeFixture) sent {
				p := sessionParts(fx.adminSession)
				return jobsWith("drover_session=" + strings.Join([]string{"9" + p[0], p[1], p[2], p[3]}, "."))
			}, toLogin...),
		page("GET /jobs with a session signed by another key", "303 to the login form",
			func(*probeFixture) sent {
				return jobsWith("drover_session=" + forgeSession("drover-admin-other", "99999999999", "a", "n"))
			}, toLogin...),
		page("GET /jobs with an expired session signed by the admin token", "303 to the login form",
			func(fx *probeFixture) sent {
				return jobsWith("drover_session=" + forgeSession(fx.admin, "1000000000", "a", "n"))
			}, toLogin...),
		page("GET /jobs with a session of a role the coordinator has not (x)", "303 to the login form",
			func(fx *probeFixture) sent {
				return jobsWith("drover_session=" + forgeSession(fx.admin, "99999999999", "x", "n"))
			}, toLogin...),
		page("GET /jobs with a session cookie of 3 parts", "303 to the login form",
			func(fx *probeFixture) sent {
				p := sessionParts(fx.adminSession)
				return jobsWith("drover_session=" + strings.Join(p[:3], "."))
			}, toLogin...),
		page("GET /jobs with an empty session cookie", "303 to the login form",
			func(*probeFixture) sent { return jobsWith("drover_session=") }, toLogin...),
		page("GET /jobs/events with a forged session", "401",
			func(*probeFixture) sent {
				return sent{method: "GET", path: "/jobs/events", cookie: "drover_session=99999999999.a.x.y"}
			}, code(401)),
		page("GET /jobs with Authorization: Bearer <admin token>", "200",
			func(fx *probeFixture) sent { return sent{method: "GET", path: "/jobs", hdr: fx.bearer(fx.admin)} }, code(200)),
		page("GET /jobs with Authorization: bearer <admin token> (lower case)", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/jobs", hdr: map[string]string{"Authorization": "bearer " + fx.admin}}
			}, code(403)),
		page("GET /jobs with Authorization: Bearer  <admin token> (two spaces)", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/jobs", hdr: map[string]string{"Authorization": "Bearer  " + fx.admin}}
			}, code(403)),
		page("GET /jobs with Authorization: Basic base64(<admin token>:)", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/jobs", hdr: map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(fx.admin+":"))}}
			}, code(403)),
		page("GET /jobs with a wrong bearer token and the admin's session cookie", "403 (the bearer token is judged)",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/jobs", hdr: fx.bearer("wrong"), cookie: "drover_session=" + fx.adminSession}
			}, code(403)),
		page("GET /jobs with the session cookie's value as a bearer token", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/jobs", hdr: fx.bearer(fx.adminSession)}
			}, code(403)),
		page("GET /api/v1/jobs without credentials", "401 with WWW-Authenticate",
			func(*probeFixture) sent { return api(nil) }, code(401), header("WWW-Authenticate", `Bearer realm="drover"`), apiError("")),
		page("GET /api/v1/jobs with Authorization: Bearer wrong", "403",
			func(fx *probeFixture) sent { return api(fx.bearer("wrong")) }, code(403), apiError("")),
		page("GET /api/v1/jobs with Authorization: Bearer (empty)", "401",
			func(*probeFixture) sent { return api(map[string]string{"Authorization": "Bearer "}) }, code(401)),
		page("GET /api/v1/jobs with the admin's session cookie only", "401 (the API takes no cookie)",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/api/v1/jobs", cookie: "drover_session=" + fx.adminSession}
			}, code(401)),
		page("GET /api/v1/jobs?private_token=<admin token>", "401 (no token in the URL)",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/api/v1/jobs?private_token=" + fx.admin}
			}, code(401)),
		page("GET /api/v1/jobs with PRIVATE-TOKEN: <admin token>", "401",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/api/v1/jobs", hdr: map[string]string{"PRIVATE-TOKEN": fx.admin}}
			}, code(401)),
		page("POST /api/v4/runners/verify with a wrong runner token", "403",
			func(*probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/runners/verify", body: []byte(`{"token":"glrt-wrong"}`)}
			}, code(403)),
		page("POST /api/v4/runners (legacy registration) with a wrong registration token", "403",
			func(*probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/runners", body: []byte(`{"token":"GR1348941wrong","description":"x"}`)}
			}, code(403)),
		page("POST /api/v4/jobs/request with an unknown runner token", "403",
			func(*probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/request", body: []byte(`{"token":"glrt-wrong"}`)}
			}, code(403)),
	}
	return ps
}

func csrfProbes() []probe {
	post := func(sentText string, s func(fx *probeFixture) sent, want int) probe {
		return probe{catCSRF, sentText, fmt.Sprintf("%d, nothing changed", want), func(fx *probeFixture) error {
			return fx.expect(s(fx), code(want), fx.unchanged())
		}}
	}
	cancel := func(fx *probeFixture) string { return fmt.Sprintf("/jobs/%d/cancel", fx.pending) }
	admin := func(fx *probeFixture) string { return "drover_session=" + fx.adminSession }
	ps := []probe{
		post("POST /jobs/{pending}/cancel, admin session, no csrf field", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: formHdr, cookie: admin(fx)}
		}, 403),
		post("POST /jobs/{pending}/cancel, admin session, csrf=wrong", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: formHdr, cookie: admin(fx), body: form(url.Values{"csrf": {"wrong"}})}
		}, 403),
		post("POST /jobs/{pending}/cancel, admin session, the viewer session's csrf", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: formHdr, cookie: admin(fx), body: form(url.Values{"csrf": {fx.viewerCSRF}})}
		}, 403),
		post("POST /jobs/{pending}/cancel?csrf=<token>, admin session (csrf in the query)", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx) + "?csrf=" + url.QueryEscape(fx.adminCSRF), hdr: formHdr, cookie: admin(fx)}
		}, 403),
		post("POST /jobs/{pending}/cancel, admin session, csrf in an X-CSRF-Token header", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: withHdr(formHdr, "X-CSRF-Token", fx.adminCSRF), cookie: admin(fx)}
		}, 403),
		post(`POST /jobs/{pending}/cancel, admin session, JSON body {"csrf": <token>}`, func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: map[string]string{"Content-Type": "application/json"}, cookie: admin(fx),
				body: []byte(`{"csrf":"` + fx.adminCSRF + `"}`)}
		}, 403),
		post("POST /jobs/{pending}/cancel, admin session, the login form's csrf value", func(fx *probeFixture) sent {
			cookie, csrf, _ := fx.loginForm()
			return sent{method: "POST", path: cancel(fx), hdr: formHdr, cookie: admin(fx) + "; drover_login=" + cookie, body: form(url.Values{"csrf": {csrf}})}
		}, 403),
		post("POST /jobs/{pending}/cancel with the right csrf but no session", func(fx *probeFixture) sent {
			return sent{method: "POST", path: cancel(fx), hdr: formHdr, body: form(url.Values{"csrf": {fx.adminCSRF}})}
		}, 401),
		post("GET /jobs/{pending}/cancel?csrf=<token>, admin session", func(fx *probeFixture) sent {
			return sent{method: "GET", path: cancel(fx) + "?csrf=" + url.QueryEscape(fx.adminCSRF), cookie: admin(fx)}
		}, 405),
		post("POST /jobs/{done}/retry, admin session, no csrf", func(fx *probeFixture) sent {
			return sent{method: "POST", path: fmt.Sprintf("/jobs/%d/retry", fx.done.ID), hdr: formHdr, cookie: admin(fx)}
		}, 403),
	}
	for _, act := range []string{"pause", "resume", "delete"} {
		ps = append(ps, post(fmt.Sprintf("POST /runners/{id}/%s, admin session, no csrf", act), func(fx *probeFixture) sent {
			return sent{method: "POST", path: fmt.Sprintf("/runners/%d/%s", fx.runnerID, act), hdr: formHdr, cookie: admin(fx)}
		}, 403))
	}
	ps = append(ps, post("POST /logout, admin session, no csrf", func(fx *probeFixture) sent {
		return sent{method: "POST", path: "/logout", hdr: formHdr, cookie: admin(fx)}
	}, 403))
	return ps
}

// xssView is a page that shows what users and runners sent.
type xssView struct {
	name string
	get  func(fx *probeFixture) sent
	sse  bool // an event stream: the HTML is in its JSON data
}

var xssViews = map[string]xssView{
	"jobs": {name: "/jobs", get: func(fx *probeFixture) sent {
		return sent{method: "GET", path: "/jobs", hdr: fx.bearer(fx.admin)}
	}},
	"job": {name: "/jobs/{id}", get: func(fx *probeFixture) sent {
		return sent{method: "GET", path: fmt.Sprintf("/jobs/%d", fx.xss), hdr: fx.bearer(fx.admin)}
	}},
	"range": {name: "/jobs/{id}/log/range", get: func(fx *probeFixture) sent {
		return sent{method: "GET", path: fmt.Sprintf("/jobs/%d/log/range?to=%d", fx.xss, fx.xssSize), hdr: fx.bearer(fx.admin)}
	}},
	"live": {name: "/jobs/{id}/log (SSE)", sse: true, get: func(fx *probeFixture) sent {
		return sent{method: "GET", path: fmt.Sprintf("/jobs/%d/log?from=0&offset=0", fx.xss), hdr: fx.bearer(fx.admin)}
	}},
	"runners": {name: "/runners", get: func(fx *probeFixture) sent {
		return sent{method: "GET", path: "/runners", hdr: fx.bearer(fx.admin)}
	}},
}

// sseHTML returns the HTML an event stream carries: the "h" of its log
// events' JSON, and the data of its other events.
func sseHTML(body []byte) string {
	var out strings.Builder
	for l := range strings.SplitSeq(string(body), "\n") {
		d, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		var evs []map[string]any
		if json.Unmarshal([]byte(d), &evs) != nil {
			out.WriteString(d + "\n")
			continue
		}
		for _, ev := range evs {
			for _, k := range []string{"h", "n"} {
				if s, ok := ev[k].(string); ok {
					out.WriteString(s + "\n")
				}
			}
		}
	}
	return out.String()
}

// shownEscaped checks that the marker of payload is in the view (the input
// reached it) and the payload's markup from its '<' is not.
func shownEscaped(payload string, sse bool) check {
	marker := regexp.MustCompile(`alert\(\d+\)`).FindString(payload)
	raw := payload[strings.IndexByte(payload, '<'):]
	raw = strings.TrimSuffix(raw, "\x1b[0m")
	return func(resp *http.Response, body []byte) error {
		text := string(body)
		if sse {
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				return fmt.Errorf("Content-Type %q", ct)
			}
			text = sseHTML(body)
		} else {
			if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				return fmt.Errorf("Content-Type %q", ct)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
				return fmt.Errorf("Content-Security-Policy %q", csp)
			}
		}
		if !strings.Contains(text, marker) {
			return fmt.Errorf("the input (%s) is not in the view: the probe proves nothing", marker)
		}
		if strings.Contains(text, raw) {
			return fmt.Errorf("the view holds %q unescaped", raw)
		}
		return nil
	}
}

func xssProbes() []probe {
	x := xssInputs
	in := func(sentText, payload string, views ...string) probe {
		var names []string
		for _, v := range views {
			names = append(names, xssViews[v].name)
		}
		return probe{catXSS, sentText, "escaped in " + strings.Join(names, ", "), func(fx *probeFixture) error {
			for _, v := range views {
				view := xssViews[v]
				if err := fx.expect(view.get(fx), code(200), shownEscaped(payload, view.sse)); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	return []probe{
		in("job name "+x.name, x.name, "jobs", "job", "runners"),
		in("job stage "+x.stage, x.stage, "job"),
		in("job image "+x.image, x.image, "job"),
		in("job tag "+x.tag, x.tag, "job"),
		in("runner description "+x.desc, x.desc, "job", "runners"),
		in("manager version (jobs/request info) "+x.version, x.version, "runners"),
		in("manager executor, platform, architecture "+x.executor, x.executor, "runners"),
		in("manager system_id "+x.systemID, x.systemID, "runners"),
		in("log line "+x.logPlain, x.logPlain, "job", "range", "live"),
		in("log line in ANSI colour "+strings.ReplaceAll(x.logANSI, "\x1b", `\e`), x.logANSI, "job", "range", "live"),
		in("log section header "+x.logSection, x.logSection, "job", "range", "live"),
		in("artifact file name "+x.artifact, x.artifact, "job"),
		{catXSS, "failure_reason <script>alert(113)</script> (PUT)", "stored as unknown_failure; the payload is nowhere",
			func(fx *probeFixture) error {
				for _, v := range []string{"jobs", "job"} {
					if err := fx.expect(xssViews[v].get(fx), code(200), has("unknown_failure"), lacks("alert(113)")); err != nil {
						return err
					}
				}
				return nil
			}},
		{catXSS, `GET /login?next=/jobs?q="><script>alert(114)</script>`, "200 form, next escaped in its field",
			func(fx *probeFixture) error {
				return fx.expect(loginGET("", `/jobs?q="><script>alert(114)</script>`), code(200),
					shownEscaped(`"><script>alert(114)</script>`, false))
			}},
		{catXSS, "GET /jobs?status=<script>alert(115)</script> (error page)", "400 page, the status escaped",
			func(fx *probeFixture) error {
				return fx.expect(sent{method: "GET", path: "/jobs?status=" + url.QueryEscape("<script>alert(115)</script>"), hdr: fx.bearer(fx.admin)},
					code(400), shownEscaped("<script>alert(115)</script>", false))
			}},
		{catXSS, "GET /jobs/{id}/raw of the job with the payloads", "text/plain attachment, nosniff",
			func(fx *probeFixture) error {
				return fx.expect(sent{method: "GET", path: fmt.Sprintf("/jobs/%d/raw", fx.xss), hdr: fx.bearer(fx.admin)}, code(200),
					header("Content-Type", "text/plain; charset=utf-8"), header("X-Content-Type-Options", "nosniff"),
					header("Content-Disposition", fmt.Sprintf(`attachment; filename="job-%d.log"`, fx.xss)))
			}},
	}
}

func tokenProbes() []probe {
	put := func(id int64, tok string) sent {
		b, _ := json.Marshal(api.UpdateJobRequest{Token: tok, State: api.StateSuccess})
		return sent{method: "PUT", path: fmt.Sprintf("/api/v4/jobs/%d", id), hdr: map[string]string{hdrJobToken: tok}, body: b}
	}
	row := func(sentText, want string, s func(fx *probeFixture) sent, checks ...check) probe {
		return probe{catToken, sentText, want, func(fx *probeFixture) error {
			return fx.expect(s(fx), append(checks, fx.after("jobs a, b", func() (bool, string) {
				a, b := fx.jobStatus(fx.a.ID), fx.jobStatus(fx.b.ID)
				return a == "running" && b == "running", a + ", " + b
			}), fx.unchanged())...)
		}}
	}
	return []probe{
		row("PUT /api/v4/jobs/{b} success with job a's token", "403",
			func(fx *probeFixture) sent { return put(fx.b.ID, fx.a.Token) }, code(403)),
		row("PATCH /api/v4/jobs/{b}/trace with job a's token", "403",
			func(fx *probeFixture) sent {
				return sent{method: "PATCH", path: fmt.Sprintf("/api/v4/jobs/%d/trace", fx.b.ID),
					hdr: map[string]string{hdrJobToken: fx.a.Token, "Content-Range": "0-1"}, body: []byte("xx")}
			}, code(403)),
		row("POST /api/v4/jobs/{b}/artifacts with job a's token", "403",
			func(fx *probeFixture) sent {
				ct, body := multipartBody(fx.t, "file", "a.zip", []byte("PK"))
				return sent{method: "POST", path: fmt.Sprintf("/api/v4/jobs/%d/artifacts", fx.b.ID), hdr: map[string]string{hdrJobToken: fx.a.Token, "Content-Type": ct}, body: body}
			}, code(403)),
		row("GET /api/v4/jobs/{done}/artifacts with job a's token (a does not depend on done)", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: fmt.Sprintf("/api/v4/jobs/%d/artifacts", fx.done.ID), hdr: map[string]string{hdrJobToken: fx.a.Token}}
			}, code(403), lacks("PK archive")),
		row("PUT /api/v4/jobs/{a} with the runner token as job token", "403",
			func(fx *probeFixture) sent { return put(fx.a.ID, fx.runnerTok) }, code(403)),
		row("PUT /api/v4/jobs/{a} with the admin token as job token", "403",
			func(fx *probeFixture) sent { return put(fx.a.ID, fx.admin) }, code(403)),
		row("POST /api/v4/jobs/request with the admin token as runner token", "403, no job handed out",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/request", body: []byte(`{"token":"` + fx.admin + `"}`)}
			}, code(403)),
		row("POST /api/v4/jobs/request with the registration token", "403, no job handed out",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/request", body: []byte(`{"token":"` + fx.reg + `"}`)}
			}, code(403)),
		row("GET /api/v1/jobs with the runner token as bearer", "403",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/api/v1/jobs", hdr: fx.bearer(fx.runnerTok)}
			}, code(403)),
		row("POST /api/v1/jobs/{pending}/cancel with job a's token as bearer", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/api/v1/jobs/%d/cancel", fx.pending), hdr: fx.bearer(fx.a.Token)}
			}, code(403)),
		row("POST /api/v1/jobs/{pending}/cancel with the viewer token as bearer", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/api/v1/jobs/%d/cancel", fx.pending), hdr: fx.bearer(fx.viewer)}
			}, code(403)),
		row("POST /jobs/{pending}/cancel (web) with the viewer token as bearer", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/jobs/%d/cancel", fx.pending), hdr: fx.bearer(fx.viewer)}
			}, code(403)),
		row("POST /runners/{id}/delete (web) with the viewer's session and its csrf", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/runners/%d/delete", fx.runnerID), hdr: formHdr,
					cookie: "drover_session=" + fx.viewerSession, body: form(url.Values{"csrf": {fx.viewerCSRF}})}
			}, code(403)),
		row("POST /api/v1/jobs/{pending}/cancel with another project's maintainer token", "404, as a job that does not exist",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/api/v1/jobs/%d/cancel", fx.pending), hdr: fx.bearer(fx.otherMaintainer)}
			}, code(404)),
		row("GET /api/v1/jobs/{a}/trace with another project's maintainer token", "404, no trace",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d/trace", fx.a.ID), hdr: fx.bearer(fx.otherMaintainer)}
			}, code(404), lacks(aTrace)),
		row("GET /api/v1/jobs/{done}/artifacts with another project's viewer token", "404, no archive",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d/artifacts", fx.done.ID), hdr: fx.bearer(fx.otherViewer)}
			}, code(404), lacks("PK archive")),
		row("GET /api/v1/jobs?limit=1000 with another project's viewer token", "200, no job listed",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/api/v1/jobs?limit=1000", hdr: fx.bearer(fx.otherViewer)}
			}, code(200), jobCount(0)),
		row("POST /api/v1/pipelines/1/cancel with a viewer's project token", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v1/pipelines/1/cancel", hdr: fx.bearer(fx.otherViewer)}
			}, code(403)),
		row("PATCH /api/v1/projects/probe%2Fother with the project's maintainer token", "403",
			func(fx *probeFixture) sent {
				return sent{method: "PATCH", path: "/api/v1/projects/probe%2Fother", hdr: fx.bearer(fx.otherMaintainer), body: []byte(`{"repo_url":"/etc"}`)}
			}, code(403)),
		row("POST /api/v4/jobs/request with a project token as runner token", "403, no job handed out",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/request", body: []byte(`{"token":"` + fx.otherMaintainer + `"}`)}
			}, code(403)),
		row("PUT /api/v4/jobs/{a} with a project token as job token", "403",
			func(fx *probeFixture) sent { return put(fx.a.ID, fx.otherMaintainer) }, code(403)),
		row("POST /jobs/{pending}/cancel (web) with another project's maintainer token as bearer", "404, as a job that does not exist",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: fmt.Sprintf("/jobs/%d/cancel", fx.pending), hdr: fx.bearer(fx.otherMaintainer)}
			}, code(404)),
		row("GET /jobs/{a}/raw (web) with another project's viewer token as bearer", "404, no log",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: fmt.Sprintf("/jobs/%d/raw", fx.a.ID), hdr: fx.bearer(fx.otherViewer)}
			}, code(404), lacks(aTrace)),
		row("GET /runners (web) with a project token as bearer", "404",
			func(fx *probeFixture) sent {
				return sent{method: "GET", path: "/runners", hdr: fx.bearer(fx.otherMaintainer)}
			}, code(404), lacks("probe runner")),
		row("POST /api/v4/jobs/watch (with the runner's token) of job b with job a's token", "200, job b answered 404 as a job that does not exist",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/watch", body: []byte(fmt.Sprintf(`{"token":%q,"jobs":[{"id":%d,"token":%q,"job_status":"running"}],"timeout":1}`, fx.runnerTok, fx.b.ID, fx.a.Token))}
			}, code(200), has(`"status_code":404`)),
		row("POST /api/v4/jobs/watch without a runner token", "403",
			func(fx *probeFixture) sent {
				return sent{method: "POST", path: "/api/v4/jobs/watch", body: []byte(fmt.Sprintf(`{"jobs":[{"id":%d,"token":%q,"job_status":"running"}],"timeout":1}`, fx.b.ID, fx.b.Token))}
			}, code(403)),
	}
}

// dataDirClean: nothing but what the coordinator keeps is in its data
// directory, and the artifact files are named by the coordinator.
func (fx *probeFixture) dataDirClean() check {
	return fx.after("the data directory", func() (bool, string) {
		var odd []string
		filepath.WalkDir(fx.e.dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(fx.e.dir, p)
			if strings.Contains(rel, "passwd") || strings.Contains(rel, "win.ini") || strings.Contains(rel, "evil") {
				odd = append(odd, rel)
			}
			return nil
		})
		return len(odd) == 0, fmt.Sprintf("holds %v", odd)
	})
}

func artifactProbes() []probe {
	upload := func(fx *probeFixture, query, filename string) sent {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{`form-data; name="file"; filename="` + filename + `"`}
		h["Content-Type"] = []string{"application/zip"}
		pw, _ := mw.CreatePart(h)
		pw.Write([]byte("PK evil"))
		mw.Close()
		path := fmt.Sprintf("/api/v4/jobs/%d/artifacts", fx.b.ID)
		if query != "" {
			path += "?" + query
		}
		return sent{method: "POST", path: path, hdr: map[string]string{hdrJobToken: fx.b.Token, "Content-Type": mw.FormDataContentType()}, body: b.Bytes()}
	}
	filename := func(want string) check {
		return func(_ *http.Response, body []byte) error {
			var a artifactView
			if err := json.Unmarshal(body, &a); err != nil || a.Filename != want {
				return fmt.Errorf("filename %q, want %q", a.Filename, want)
			}
			return nil
		}
	}
	dl := func(fx *probeFixture, checks ...check) check {
		return func(*http.Response, []byte) error {
			return fx.expect(sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d/artifacts", fx.b.ID), hdr: fx.bearer(fx.admin)}, checks...)
		}
	}
	row := func(sentText, want string, run func(fx *probeFixture) error) probe {
		return probe{catArtifact, sentText, want, run}
	}
	// Each upload that is stored is of its own type: a job's artifact of
	// a type is written once.
	return []probe{
		row("upload ?artifact_type=../../admin-token", "400 on artifact_type", func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=../../admin-token", "a.zip"), code(400), apiError("artifact_type"), fx.dataDirClean())
		}),
		row("upload ?artifact_type=archive/../../evil", "400 on artifact_type", func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=archive/../../evil", "a.zip"), code(400), apiError("artifact_type"), fx.dataDirClean())
		}),
		row("upload ?artifact_type=junit&artifact_format=../raw", "400 on artifact_format", func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=junit&artifact_format=../raw", "a.xml"), code(400), apiError("artifact_format"), fx.dataDirClean())
		}),
		row(`upload, file name "../../../../etc/passwd"`, `201, stored under the coordinator's name, filename "passwd"`, func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=junit&artifact_format=gzip", "../../../../etc/passwd"), code(201), filename("passwd"), fx.dataDirClean())
		}),
		row(`upload, file name "/etc/passwd"`, `201, filename "passwd"`, func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=dotenv&artifact_format=gzip", "/etc/passwd"), code(201), filename("passwd"), fx.dataDirClean())
		}),
		row(`upload, file name "..\..\windows\win.ini"`, `201, filename "win.ini"`, func(fx *probeFixture) error {
			return fx.expect(upload(fx, "artifact_type=metadata&artifact_format=gzip", `..\..\windows\win.ini`), code(201), filename("win.ini"), fx.dataDirClean())
		}),
		row(`upload, file name 'a.zip\"; filename=evil.sh' (quote)`, `201, filename "artifacts.zip"; the download's Content-Disposition names only it`, func(fx *probeFixture) error {
			return fx.expect(upload(fx, "", `a.zip\"; filename=evil.sh`), code(201), filename("artifacts.zip"),
				dl(fx, code(200), header("Content-Disposition", `attachment; filename=artifacts.zip`)))
		}),
		row("GET /api/v1/jobs/{done}/artifacts?artifact_type=../../coordinator.db", "400 on artifact_type", func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: fmt.Sprintf("/api/v1/jobs/%d/artifacts?artifact_type=../../coordinator.db", fx.done.ID), hdr: fx.bearer(fx.admin)},
				code(400), apiError("artifact_type"))
		}),
		row("GET /api/v4/jobs/..%2F..%2Fadmin-token/artifacts", "404, not the token", func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: "/api/v4/jobs/..%2F..%2Fadmin-token/artifacts", hdr: fx.bearer(fx.admin)},
				code(404), lacks(fx.admin))
		}),
		row("GET /jobs/{done}/artifacts?artifact_type=..%2Fsecret-key (web)", "400, not the key", func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: fmt.Sprintf("/jobs/%d/artifacts?artifact_type=..%%2Fsecret-key", fx.done.ID), hdr: fx.bearer(fx.admin)},
				code(400))
		}),
		row("GET /static/../admin-token", "not the token (a redirect on this site or 404)", func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: "/static/../admin-token"}, code(301, 307, 404), onSite, lacks(fx.admin))
		}),
		row("GET /static/%2e%2e/admin-token", "not the token (a redirect on this site or 404)", func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: "/static/%2e%2e/admin-token"}, code(301, 307, 400, 404), onSite, lacks(fx.admin))
		}),
	}
}

func oversizeProbes() []probe {
	big := func(n int) []byte {
		// A JSON object whose one string is n bytes long.
		return []byte(`{"name":"j","script":["` + strings.Repeat("x", n) + `"]}`)
	}
	row := func(sentText string, s func(fx *probeFixture) sent, want ...int) probe {
		return probe{catOversize, sentText, fmt.Sprintf("%v, nothing stored", want), func(fx *probeFixture) error {
			return fx.expect(s(fx), code(want...), fx.unchanged())
		}}
	}
	return []probe{
		row("POST /api/v1/jobs, 4 MiB + 1 KiB JSON", func(fx *probeFixture) sent {
			return sent{method: "POST", path: "/api/v1/jobs", hdr: fx.bearer(fx.admin), body: big(4<<20 + 1024)}
		}, 413),
		row("POST /api/v1/jobs, 5 MiB JSON, chunked (no Content-Length)", func(fx *probeFixture) sent {
			return sent{method: "POST", path: "/api/v1/jobs", hdr: fx.bearer(fx.admin), body: big(5 << 20), chunked: true}
		}, 413),
		row("POST /api/v1/runners, 4 MiB + 1 KiB JSON", func(fx *probeFixture) sent {
			return sent{method: "POST", path: "/api/v1/runners", hdr: fx.bearer(fx.admin), body: []byte(`{"description":"` + strings.Repeat("x", 4<<20+1024) + `"}`)}
		}, 413),
		row("POST /api/v4/jobs/request, 1 MiB + 1 KiB JSON", func(fx *probeFixture) sent {
			return sent{method: "POST", path: "/api/v4/jobs/request", body: []byte(`{"token":"` + fx.runnerTok + `","info":{"name":"` + strings.Repeat("x", 1<<20+1024) + `"}}`)}
		}, 413),
		row("PUT /api/v4/jobs/{a}, 1 MiB + 1 KiB JSON", func(fx *probeFixture) sent {
			return sent{method: "PUT", path: fmt.Sprintf("/api/v4/jobs/%d", fx.a.ID), hdr: map[string]string{hdrJobToken: fx.a.Token},
				body: []byte(`{"token":"` + fx.a.Token + `","state":"success","checksum":"` + strings.Repeat("x", 1<<20+1024) + `"}`)}
		}, 413),
		row("PATCH /api/v4/jobs/{a}/trace, 1 MiB + 1 byte with a matching Content-Range", func(fx *probeFixture) sent {
			n := 1<<20 + 1
			return sent{method: "PATCH", path: fmt.Sprintf("/api/v4/jobs/%d/trace", fx.a.ID),
				hdr: map[string]string{hdrJobToken: fx.a.Token, "Content-Range": fmt.Sprintf("%d-%d", len(aTrace), len(aTrace)+n-1)}, body: bytes.Repeat([]byte("x"), n)}
		}, 413),
		row("POST /api/v4/jobs/{b}/artifacts, over --max-artifact-size", func(fx *probeFixture) sent {
			ct, body := multipartBody(fx.t, "file", "big.zip", bytes.Repeat([]byte("x"), probeMaxArtifact+1))
			return sent{method: "POST", path: fmt.Sprintf("/api/v4/jobs/%d/artifacts", fx.b.ID), hdr: map[string]string{hdrJobToken: fx.b.Token, "Content-Type": ct}, body: body}
		}, 413),
		row("POST /api/v4/jobs/watch, 1 MiB + 1 KiB JSON", func(fx *probeFixture) sent {
			return sent{method: "POST", path: "/api/v4/jobs/watch", body: []byte(`{"jobs":[],"x":"` + strings.Repeat("x", 1<<20+1024) + `"}`)}
		}, 413),
		row("POST /login, a 1 MiB form", func(fx *probeFixture) sent {
			cookie, csrf, _ := fx.loginForm()
			return sent{method: "POST", path: "/login", hdr: formHdr, cookie: "drover_login=" + cookie,
				body: form(url.Values{"csrf": {csrf}, "token": {fx.admin}, "pad": {strings.Repeat("x", 1<<20)}})}
		}, 403, 413),
	}
}

func rangeProbes() []probe {
	row := func(cr string, body string, want int, checks ...check) probe {
		return probe{catRange, fmt.Sprintf("PATCH /api/v4/jobs/{a}/trace (trace of 10 bytes), Content-Range %q, %d-byte body", cr, len(body)),
			fmt.Sprint(want, ", trace unchanged"), func(fx *probeFixture) error {
				hdr := map[string]string{hdrJobToken: fx.a.Token, "Content-Type": "text/plain"}
				if cr != "-" {
					hdr["Content-Range"] = cr
				}
				return fx.expect(sent{method: "PATCH", path: fmt.Sprintf("/api/v4/jobs/%d/trace", fx.a.ID), hdr: hdr, body: []byte(body)},
					append([]check{code(want)}, append(checks, fx.unchanged())...)...)
			}}
	}
	five := "xxxxx"
	return []probe{
		row("-", five, 400, apiError("Content-Range")),
		row("abc", five, 400, apiError("Content-Range")),
		row("14-10", five, 400, apiError("Content-Range")),
		row("-1-3", five, 400, apiError("Content-Range")),
		row("10-", five, 400, apiError("Content-Range")),
		row("+10-14", five, 400, apiError("Content-Range")),
		row("10 - 14", five, 400, apiError("Content-Range")),
		row("bytes 10-14/15", five, 400, apiError("Content-Range")),
		row("10-14,15-19", five, 400, apiError("Content-Range")),
		row("10-18446744073709551616", five, 400, apiError("Content-Range")),
		row("10-19", five, 400, apiError("Content-Range")),
		row("20-24", five, 416, header("Range", "0-10")),
		row("0-4", five, 416, header("Range", "0-10")),
		row("0-9223372036854775807", "x", 413),
		row("9223372036854775807-9223372036854775807", "x", 416, header("Range", "0-10")),
		{catRange, `PATCH /api/v4/jobs/{done}/trace (finished) with its token, Content-Range "0-4"`, "403, trace unchanged", func(fx *probeFixture) error {
			return fx.expect(sent{method: "PATCH", path: fmt.Sprintf("/api/v4/jobs/%d/trace", fx.done.ID),
				hdr: map[string]string{hdrJobToken: fx.done.Token, "Content-Range": "0-4"}, body: []byte(five)}, code(403), fx.unchanged())
		}},
	}
}

func jsonProbes() []probe {
	row := func(path, body string, want int, field string) probe {
		return probe{catJSON, fmt.Sprintf("%s %.80q", path, body), fmt.Sprintf("%d on %q, nothing stored", want, field), func(fx *probeFixture) error {
			method, p, _ := strings.Cut(path, " ")
			hdr := fx.bearer(fx.admin)
			if strings.HasPrefix(p, "/api/v4/") {
				hdr = map[string]string{hdrJobToken: fx.a.Token, "Content-Type": "application/json"}
			}
			p = strings.ReplaceAll(p, "{a}", fmt.Sprint(fx.a.ID))
			return fx.expect(sent{method: method, path: p, hdr: hdr, body: []byte(body)}, code(want), apiError(field), fx.unchanged())
		}}
	}
	const submit = "POST /api/v1/jobs"
	return []probe{
		row(submit, "", 400, ""),
		row(submit, "{", 400, ""),
		row(submit, "[]", 400, ""),
		row(submit, "null", 400, "name"),
		row(submit, `{"name":"j","script":["x"]}{}`, 400, ""),
		row(submit, `{"name":1,"script":["x"]}`, 400, "name"),
		row(submit, `{"nmae":"j","script":["x"]}`, 400, "nmae"),
		row(submit, "\ufeff"+`{"name":"j","script":["x"]}`, 400, ""),
		row(submit, `{"name":"j","script":["x"],"image":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`, 400, ""),
		row(submit, `{"name":"j","script":["x"],"timeout":1e400}`, 400, "timeout"),
		row(submit, `{"name":"j","script":["x"],"timeout":9223372036854775808}`, 400, "timeout"),
		row(submit, `{"name":"j","script":"echo"}`, 400, "script"),
		row(submit, "{\"name\":\"j\xff\",\"script\":[\"x\"]}", 400, "name"),
		row(submit, `{"name":"j\u0000","script":["x"]}`, 400, "name"),
		row("POST /api/v4/jobs/request", `{"token":123}`, 400, "token"),
		row("PUT /api/v4/jobs/{a}", `{"state":`, 400, ""),
		row("PUT /api/v4/jobs/{a}", `{"token":["x"],"state":"success"}`, 400, "token"),
		row("POST /api/v4/jobs/watch", `{"jobs":"x"}`, 400, "jobs"),
		row("POST /api/v1/runners", `{"tag_list":[1]}`, 400, "tag_list"),
	}
}

func pageProbes() []probe {
	row := func(query string, want int, checks ...check) probe {
		return probe{catPage, "GET /api/v1/jobs?" + query, fmt.Sprint(want), func(fx *probeFixture) error {
			q := strings.ReplaceAll(query, "{a}", fmt.Sprint(fx.a.ID))
			return fx.expect(sent{method: "GET", path: "/api/v1/jobs?" + q, hdr: fx.bearer(fx.admin)}, append([]check{code(want)}, checks...)...)
		}}
	}
	web := func(query string, want int) probe {
		return probe{catPage, "GET /jobs?" + query + " (web)", fmt.Sprint(want), func(fx *probeFixture) error {
			return fx.expect(sent{method: "GET", path: "/jobs?" + query, hdr: fx.bearer(fx.admin)}, code(want))
		}}
	}
	return []probe{
		row("limit=0", 400, apiError("limit")),
		row("limit=-1", 400, apiError("limit")),
		row("limit=1001", 400, apiError("limit")),
		row("limit=abc", 400, apiError("limit")),
		row("limit=1e3", 400, apiError("limit")),
		row("limit=99999999999999999999", 400, apiError("limit")),
		row("after_id=-1", 400, apiError("after_id")),
		row("before_id=abc", 400, apiError("before_id")),
		row("after_id=9223372036854775808", 400, apiError("after_id")),
		row("after_id=9223372036854775807", 200, jobCount(0)),
		row("order=random", 400, apiError("order")),
		row("status=bogus", 400, apiError("status")),
		row("status=pending,bogus", 400, apiError("status")),
		row("status="+url.QueryEscape("pending' OR '1'='1"), 400, apiError("status")),
		row("project="+url.QueryEscape("' OR '1'='1"), 200, jobCount(0)),
		row("project=%25", 200, jobCount(0)),
		row("project=default%2F%25", 200, jobCount(0)),
		row("limit=1&after_id={a}", 200, jobCount(1)),
		row("limit=1&limit=5000", 200, jobCount(1)),
		web("before=-1", 400),
		web("after=abc", 400),
	}
}
