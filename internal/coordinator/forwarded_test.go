package coordinator

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/httpserver"
)

// TestJobURLsForwardedProto: without PublicURL, a job's URLs take the
// scheme X-Forwarded-Proto gives only when a trusted proxy sends it; from
// anyone else the header is ignored.
func TestJobURLsForwardedProto(t *testing.T) {
	proxies, err := httpserver.ParseTrustedProxies([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		proxies httpserver.TrustedProxies
		want    string
	}{
		{"untrusted", nil, "http"},
		{"trusted proxy", proxies, "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.srv.Close()
			e.srv = httptest.NewServer(tc.proxies.Handler(e.c.Handler()))
			_, tok := e.runner(nil)
			e.submit(nil)
			req := api.JobRequest{Token: tok, SystemID: "s_test", Info: api.VersionInfo{Features: api.FeaturesInfo{Image: true, Services: true}}}
			resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{"X-Forwarded-Proto": "https"}, req)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("jobs/request = %d %s, want 201", resp.StatusCode, b)
			}
			var jr api.JobResponse
			e.decode(b, &jr)
			if got := jr.Variables.Get("CI_SERVER_PROTOCOL"); got != tc.want {
				t.Errorf("CI_SERVER_PROTOCOL = %q (CI_SERVER_URL %q), want %q", got, jr.Variables.Get("CI_SERVER_URL"), tc.want)
			}
		})
	}
}
