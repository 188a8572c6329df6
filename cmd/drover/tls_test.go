package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/httpserver/tlstest"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// startDaemon runs drover with args until the test ends and returns its
// log; the command must end without an error once its context ends.
func startDaemon(t *testing.T, args ...string) (*lockedbuf.Buffer, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &lockedbuf.Buffer{}
	root := newRootCmd()
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("drover %s = %v", args[0], err)
		}
	})
	return out, done
}

// httpsGet GETs url with c (Authorization: Bearer bearer unless empty) and
// returns the status and body, or the error.
func httpsGet(t *testing.T, c *http.Client, url, bearer string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// checkSecured checks a daemon's server at base (https://host:port): a
// client with the CA is served, one without it fails on the certificate;
// /metrics needs the token and mentions metric, health does not.
func checkSecured(t *testing.T, ca *tlstest.CA, base, token, metric string) {
	t.Helper()
	withCA := ca.Client()
	if code, body, err := httpsGet(t, withCA, base+"/health/live", ""); err != nil || code != http.StatusOK {
		t.Errorf("GET %s/health/live with the CA = %d %q, %v; want 200", base, code, body, err)
	}
	var unknown x509.UnknownAuthorityError
	if _, _, err := httpsGet(t, &http.Client{}, base+"/health/live", ""); !errors.As(err, &unknown) {
		t.Errorf("GET %s/health/live without the CA = %v, want an unknown-authority error", base, err)
	}
	if code, _, err := httpsGet(t, withCA, base+"/metrics", ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token = %d, %v; want 401", code, err)
	}
	if code, _, err := httpsGet(t, withCA, base+"/metrics", "wrong"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a wrong token = %d, %v; want 401", code, err)
	}
	if code, body, err := httpsGet(t, withCA, base+"/metrics", token); err != nil || code != http.StatusOK || !strings.Contains(body, metric) {
		t.Errorf("GET /metrics with the token = %d, %v; want 200 with %s", code, err, metric)
	}
}

// secureFiles makes a CA, a certificate for 127.0.0.1 and a metrics token
// file.
func secureFiles(t *testing.T) (ca *tlstest.CA, cert, key, tokenFile, token string) {
	t.Helper()
	ca = tlstest.NewCA(t)
	cert, key, _ = ca.Issue(t, "127.0.0.1")
	token = "metrics-s3cret"
	tokenFile = filepath.Join(t.TempDir(), "metrics-token")
	writeTestFile(t, tokenFile, token+"\n")
	return ca, cert, key, tokenFile, token
}

// TestDaemonsServeTLS: drover coordinator and drover router with
// --tls-cert, --tls-key and --metrics-token-file serve HTTPS only, which
// a client trusting the CA reaches and others do not, with /metrics
// behind the token.
func TestDaemonsServeTLS(t *testing.T) {
	ca, cert, key, tokenFile, token := secureFiles(t)
	forEachDaemon(t, []string{"--tls-cert", cert, "--tls-key", key, "--metrics-token-file", tokenFile}, func(t *testing.T, daemon, addr string, out *lockedbuf.Buffer) {
		if !strings.Contains(out.String(), "addr=https://"+addr) {
			t.Errorf("the listening line does not say https:\n%s", out.String())
		}
		checkSecured(t, ca, "https://"+addr, token, "drover_"+daemon+"_connections")
		// Plain HTTP gets no API answer.
		if code, body, err := httpsGet(t, &http.Client{}, "http://"+addr+"/health/live", ""); err == nil && code == http.StatusOK {
			t.Errorf("plain HTTP GET /health/live = %d %q, want no answer of the API", code, body)
		}
	})
}

// TestDaemonTLSFlagsRefused: a certificate without its key, a key without
// its certificate (the router's upstream client certificate too), a CA
// file without a certificate, an empty token file and a bad
// --trusted-proxies entry are usage errors naming the flag.
func TestDaemonTLSFlagsRefused(t *testing.T) {
	_, cert, key, _, _ := secureFiles(t)
	empty := filepath.Join(t.TempDir(), "empty")
	writeTestFile(t, empty, "\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"coordinator", "--tls-cert", cert}, "--tls-cert"},
		{[]string{"router", "--upstream", "http://127.0.0.1:1", "--upstream-token", "glrt-x", "--tls-key", key}, "--tls-key"},
		{[]string{"coordinator", "--tls-cert", key, "--tls-key", cert}, "--tls-cert"},
		{[]string{"router", "--upstream", "https://127.0.0.1:1", "--upstream-token", "glrt-x", "--upstream-tls-cert-file", cert}, "--upstream-tls-"},
		{[]string{"router", "--upstream", "https://127.0.0.1:1", "--upstream-token", "glrt-x", "--upstream-tls-ca-file", empty}, "--upstream-tls-"},
		{[]string{"coordinator", "--metrics-token-file", empty}, "--metrics-token-file"},
		{[]string{"coordinator", "--trusted-proxies", "10.0.0.0/8,proxy.example"}, "--trusted-proxies"},
	} {
		args := append(tc.args, "--listen", "127.0.0.1:0", "--data", t.TempDir())
		if _, code, err := drover(t, args...); code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("drover %v = exit %d, %v; want 2 naming %s", tc.args, code, err, tc.want)
		}
	}
}

// TestRunOverTLS: a runner registered with --tls-ca-file against a
// coordinator serving HTTPS runs a job there end to end, its manager's
// listen_address serving HTTPS with /metrics behind a token; registering
// without the CA fails on the certificate.
func TestRunOverTLS(t *testing.T) {
	clearRegisterEnv(t)
	t.Setenv("DROVER_DATABASE_URL", "")
	const admin = "admin-token-for-the-test"
	t.Setenv("DROVER_ADMIN_TOKEN", admin)
	ca, cert, key, tokenFile, token := secureFiles(t)
	data := t.TempDir()
	cout, cdone := startDaemon(t, "coordinator", "--listen", "127.0.0.1:0", "--data", data,
		"--tls-cert", cert, "--tls-key", key, "--metrics-token-file", tokenFile)
	url := "https://" + listeningAt(t, cout, "coordinator listening", cdone)
	regToken := strings.TrimSpace(readFile(t, filepath.Join(data, "registration-token")))

	t.Chdir(t.TempDir())
	out, code, err := drover(t, "register", "-c", "nocafile.toml", "-u", url, "-r", regToken, "--name", "no-ca")
	if code == 0 || err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("register without --tls-ca-file = exit %d, %v; want a certificate error\n%s", code, err, out)
	}
	if out, code, err := drover(t, "register", "-c", "config.toml", "-u", url, "-r", regToken, "--name", "tls", "--tls-ca-file", ca.CertFile); code != 0 {
		t.Fatalf("register --tls-ca-file = exit %d (%v)\n%s", code, err, out)
	}
	cfg := readFile(t, "config.toml")
	if !strings.Contains(cfg, `tls-ca-file = "`+ca.CertFile+`"`) {
		t.Fatalf("config.toml lacks tls-ca-file:\n%s", cfg)
	}
	writeTestFile(t, "config.toml", "listen_address = \"127.0.0.1:0\"\n"+cfg)

	rout, rdone := startDaemon(t, "run", "-c", "config.toml",
		"--listen-tls-cert", cert, "--listen-tls-key", key, "--listen-metrics-token-file", tokenFile)
	cl := client.New(url, admin, ca.Client())
	runJob := func(spec client.JobSpec) (*client.Job, string) {
		t.Helper()
		j, trace := runJob(t, cl, spec, rdone, rout)
		return j, string(trace)
	}
	if j, trace := runJob(client.JobSpec{Name: "over-tls", Script: []string{"echo hello over tls"}}); j.Status != "success" || !strings.Contains(trace, "hello over tls") {
		t.Errorf("job %s, log:\n%s\ndrover run said:\n%s", j.Status, trace, rout.String())
	}

	// The job's helper reaches the coordinator with the runner's CA too,
	// given to the job as the file variable CI_SERVER_TLS_CA_FILE: one job
	// uploads its artifacts, the next downloads them as its dependency.
	build, trace := runJob(client.JobSpec{Name: "build", Project: "g/tls",
		Script:    []string{"mkdir -p dist", "echo built-$CI_JOB_ID > dist/app.txt"},
		Artifacts: &client.Artifacts{Paths: []string{"dist/"}}})
	if build.Status != "success" || !strings.Contains(trace, `Uploading artifacts as "archive" to coordinator... 201 Created`) {
		t.Fatalf("artifacts upload over TLS: job %s, log:\n%s", build.Status, trace)
	}
	dep, trace := runJob(client.JobSpec{Name: "test", Project: "g/tls",
		Dependencies: []client.Dependency{{ID: build.ID}}, Script: []string{"cat dist/app.txt"}})
	if dep.Status != "success" || !strings.Contains(trace, fmt.Sprintf("Downloading artifacts for build (%d)...", build.ID)) ||
		!strings.Contains(trace, "Downloading artifacts from coordinator... ok") ||
		!strings.Contains(trace, fmt.Sprintf("built-%d", build.ID)) {
		t.Errorf("artifacts download over TLS: job %s, log:\n%s", dep.Status, trace)
	}

	m := regexp.MustCompile(`metrics and health listening.* addr=(\S+) scheme=https`).FindStringSubmatch(rout.String())
	if m == nil {
		t.Fatalf("drover run does not say its listen_address serves https:\n%s", rout.String())
	}
	checkSecured(t, ca, "https://"+m[1], token, "drover_manager_connections")
	if _, err := os.Stat("nocafile.toml"); err == nil && strings.Contains(readFile(t, "nocafile.toml"), "no-ca") {
		t.Error("the runner that could not be verified was written to its config.toml")
	}
}

// TestRouterUpstreamTLS: a router in front of a coordinator serving
// HTTPS with a private CA reaches it only with --upstream-tls-ca-file:
// without it the upstream's certificate is refused and the router's
// runner gets no job; with it the job waiting upstream is handed out.
func TestRouterUpstreamTLS(t *testing.T) {
	t.Setenv("DROVER_DATABASE_URL", "")
	const admin = "admin-token-for-the-test" // the coordinator's and the routers'
	t.Setenv("DROVER_ADMIN_TOKEN", admin)
	ca, cert, key, _, _ := secureFiles(t)
	cout, cdone := startDaemon(t, "coordinator", "--listen", "127.0.0.1:0", "--data", t.TempDir(),
		"--tls-cert", cert, "--tls-key", key)
	upstream := "https://" + listeningAt(t, cout, "coordinator listening", cdone)
	cl := client.New(upstream, admin, ca.Client())
	yes := true
	j, err := cl.Submit(t.Context(), client.JobSpec{Name: "via-router", Script: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}

	// startRouter runs a router in front of the coordinator with args and
	// returns its log and a client and runner token of its runner API.
	startRouter := func(args ...string) (*lockedbuf.Buffer, *api.Client, string) {
		t.Helper()
		up, err := cl.CreateRunner(t.Context(), client.RunnerSpec{RunUntagged: &yes})
		if err != nil {
			t.Fatal(err)
		}
		out, done := startDaemon(t, append([]string{"router", "--upstream", upstream, "--upstream-token", up.Token,
			"--listen", "127.0.0.1:0", "--data", t.TempDir(), "--long-poll-timeout", "2s"}, args...)...)
		base := "http://" + listeningAt(t, out, "router listening", done)
		rt, err := client.New(base, admin, nil).CreateRunner(t.Context(), client.RunnerSpec{RunUntagged: &yes})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := api.NewClient(base, api.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out, rc, rt.Token
	}
	// request asks the router for a job as a runner manager polls: the
	// first request is answered at once, the next (with the version the
	// first gave) is held while the router asks the upstream.
	last := ""
	request := func(rc *api.Client, token string) *api.JobResponse {
		t.Helper()
		job, resp, err := rc.RequestJob(t.Context(), api.JobRequest{Token: token, SystemID: "s_tls_router", LastUpdate: last})
		if err != nil {
			t.Fatalf("jobs/request at the router: %v", err)
		}
		last = resp.LastUpdate
		return job
	}

	out, rc, token := startRouter()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "certificate signed by unknown authority"); {
		if time.Now().After(deadline) {
			t.Fatalf("the router without --upstream-tls-ca-file does not say the upstream's certificate is unknown:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its runner waits, the router asks the upstream and fails.
	failed := regexp.MustCompile(`msg="upstream job request failed".*certificate signed by unknown authority`)
	for deadline := time.Now().Add(30 * time.Second); !failed.MatchString(out.String()); {
		if time.Now().After(deadline) {
			t.Fatalf("the router without --upstream-tls-ca-file did not fail to ask the upstream for a job:\n%s", out.String())
		}
		if job := request(rc, token); job != nil {
			t.Fatalf("the router without --upstream-tls-ca-file handed out job %d", job.ID)
		}
	}

	last = ""
	out, rc, token = startRouter("--upstream-tls-ca-file", ca.CertFile)
	var job *api.JobResponse
	for deadline := time.Now().Add(30 * time.Second); job == nil; job = request(rc, token) {
		if time.Now().After(deadline) {
			t.Fatalf("no job from the router with --upstream-tls-ca-file after 30 s:\n%s", out.String())
		}
	}
	if job.ID != j.ID {
		t.Errorf("the router handed out job %d, want %d", job.ID, j.ID)
	}
	if strings.Contains(out.String(), "x509") {
		t.Errorf("the router with --upstream-tls-ca-file logged a certificate error:\n%s", out.String())
	}
}
