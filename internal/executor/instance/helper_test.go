package instance

import (
	"runtime"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

func TestHelperRunsOn(t *testing.T) {
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7l"}[runtime.GOARCH]
	if machine == "" || runtime.GOOS != "linux" {
		t.Skipf("no uname -m known for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	other := "aarch64"
	if runtime.GOARCH == "arm64" {
		other = "x86_64"
	}
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"Linux " + machine + "\n", true},
		{"linux " + machine, true},
		{"Linux " + other, false},
		{"Darwin " + machine, false},
		{"FreeBSD amd64", false},
		{"", false},
		{"Linux", false},
		{"Linux " + machine + " extra", false},
	} {
		if got := runsOn(tc.out); got != tc.want {
			t.Errorf("runsOn(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

func TestNeedsHelper(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *api.JobResponse
		want bool
	}{
		{"nil", nil, false},
		{"script only", &api.JobResponse{}, false},
		{"cache", &api.JobResponse{Cache: []api.Cache{{Key: "k"}}}, true},
		{"artifacts", &api.JobResponse{Artifacts: []api.Artifact{{Paths: []string{"a"}}}}, true},
		{"dependencies", &api.JobResponse{Dependencies: []api.Dependency{{ID: 1}}}, true},
	} {
		if got := needsHelper(tc.job); got != tc.want {
			t.Errorf("%s: needsHelper = %v, want %v", tc.name, got, tc.want)
		}
	}
}
