package dockerfleet

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/docker"
)

func TestWarmImages(t *testing.T) {
	p := &Provider{}
	job := func(img string, services ...string) *api.JobResponse {
		j := &api.JobResponse{Image: api.Image{Name: img}}
		for _, s := range services {
			j.Services = append(j.Services, api.Image{Name: s})
		}
		return j
	}
	c1 := &docker.Config{Image: "default:1", AllowedImages: []string{"a:*", "b:*"}, AllowedServices: []string{"redis:*"}}
	p.noteImages("r1", c1, job("a:1", "redis:7"))
	p.noteImages("r1", c1, job("")) // the runner's default image
	p.noteImages("r1", c1, job("b:1"))
	p.noteImages("r1", c1, job("a:1")) // seen again: newest now
	// Refused images are not remembered: not allowed, or not references.
	p.noteImages("r1", c1, job("evil.example/a:1", "evil:1", "redis:7 "))
	p.noteImages("r1", c1, job("a:1\n"))
	p.noteImages("r1", c1, job("a:1@sha256:"+strings.Repeat("0", 64)))
	p.noteImages("r2", &docker.Config{}, job("other:1"))
	for _, tc := range []struct {
		name   string
		fixed  []string
		recent int
		want   []string
	}{
		{"none", nil, 0, nil},
		{"fixed only", []string{"x:1"}, 0, []string{"x:1"}},
		{"newest first", nil, 2, []string{"a:1", "b:1"}},
		{"all, no repeats", []string{"b:1"}, 10, []string{"b:1", "a:1", "default:1", "redis:7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.warmImages("r1", tc.fixed, tc.recent); !slices.Equal(got, tc.want) {
				t.Errorf("warmImages = %q, want %q", got, tc.want)
			}
		})
	}
	for i := range maxRecent + 5 {
		p.noteImages("r3", &docker.Config{}, job("img:"+strings.Repeat("x", i)))
	}
	if n := len(p.recent["r3"]); n != maxRecent {
		t.Errorf("remembered %d images, want at most %d", n, maxRecent)
	}
}

// A [runners.docker] host that is not a socket on the instance stops the
// runner with the file, line and key.
func TestCheckHost(t *testing.T) {
	for _, tc := range []struct {
		host, want string
	}{
		{"", ""},
		{"unix:///run/docker.sock", ""},
		{"tcp://10.0.0.1:2376", ":10: runners[0].docker.host: host \"tcp://10.0.0.1:2376\": on autoscaled instances"},
	} {
		file := filepath.Join(t.TempDir(), "config.toml")
		src := "concurrent = 1\n\n[[runners]]\n  name = \"r\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-abcdefghijkl\"\n  executor = \"docker-autoscaler\"\n  [runners.docker]\n    image = \"busybox\"\n"
		if tc.host != "" {
			src += "    host = \"" + tc.host + "\"\n"
		}
		cfg, _, err := config.Parse(file, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		var rs docker.Runners
		if _, err := rs.Apply(file, cfg); err != nil {
			t.Fatal(err)
		}
		err = Check(file, cfg, &rs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("host %q: %v", tc.host, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), file+tc.want)):
			t.Errorf("host %q: %v; want %q", tc.host, err, tc.want)
		}
	}
}
