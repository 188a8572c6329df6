package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
	"github.com/google/go-cmp/cmp"
)

func TestSubmitJobImageValidation(t *testing.T) {
	e := newEnv(t, nil)
	many := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf(`"svc%d"`, i)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	for _, tc := range []struct {
		name     string
		image    string // JSON of image; "" leaves it out
		services string // JSON of services; "" leaves it out
		field    string // "" = accepted
	}{
		// Accepted.
		{"image string", `"alpine:3"`, "", ""},
		{"image empty string", `""`, "", ""},
		{"image null", `null`, "", ""},
		{"image object name only", `{"name":"alpine"}`, "", ""},
		{"image object full", `{"name":"alpine","entrypoint":["/bin/sh","-c"],"pull_policy":["always","if-not-present"],"docker":{"user":"1000:1000"}}`, "", ""},
		{"image pull_policy string", `{"name":"alpine","pull_policy":"never"}`, "", ""},
		{"image pull_policy empty", `{"name":"alpine","pull_policy":[]}`, "", ""},
		{"image entrypoint cleared", `{"name":"alpine","entrypoint":[""]}`, "", ""},
		{"image user integer", `{"name":"alpine","docker":{"user":0}}`, "", ""},
		{"image docker empty", `{"name":"alpine","docker":{}}`, "", ""},
		{"image docker null", `{"name":"alpine","docker":null}`, "", ""},
		{"services strings", "", `["redis:7","postgres:17"]`, ""},
		{"services null", "", `null`, ""},
		{"services empty", "", `[]`, ""},
		{"services objects", "", `[{"name":"redis:7","alias":"cache db,kv","command":["redis-server","--port","6380"],"entrypoint":["/x"],"variables":[{"key":"A_1","value":"v"}],"pull_policy":"if-not-present"}]`, ""},
		{"services mixed", "", `["redis",{"name":"pg"}]`, ""},
		{"service alias dns chars", "", `[{"name":"r","alias":"my_cache.local some-db"}]`, ""},
		{"64 services", "", many(64), ""},

		// Rejected: image.
		{"image number", `5`, "", "image"},
		{"image array", `["alpine"]`, "", "image"},
		{"image bool", `true`, "", "image"},
		{"image control char", `"alp\u0001ine"`, "", "image"},
		{"image leading space", `" alpine"`, "", "image"},
		{"image too long", `"` + strings.Repeat("a", maxImageName+1) + `"`, "", "image"},
		{"image object no name", `{"entrypoint":["sh"]}`, "", "image.name"},
		{"image object empty name", `{"name":""}`, "", "image.name"},
		{"image object name too long", `{"name":"` + strings.Repeat("a", maxImageName+1) + `"}`, "", "image.name"},
		{"image object name control", `{"name":"a\tb"}`, "", "image.name"},
		{"image object name wrong type", `{"name":1}`, "", "image.name"},
		{"image unknown key", `{"name":"a","tag":"3"}`, "", "image.tag"},
		{"image service-only key", `{"name":"a","alias":"x"}`, "", "image.alias"},
		{"image entrypoint string", `{"name":"a","entrypoint":"sh"}`, "", "image.entrypoint"},
		{"image entrypoint NUL", `{"name":"a","entrypoint":["s\u0000h"]}`, "", "image.entrypoint[0]"},
		{"image pull_policy unknown", `{"name":"a","pull_policy":"sometimes"}`, "", "image.pull_policy"},
		{"image pull_policy empty string", `{"name":"a","pull_policy":""}`, "", "image.pull_policy"},
		{"image pull_policy one bad", `{"name":"a","pull_policy":["always","Never"]}`, "", "image.pull_policy"},
		{"image pull_policy number in array", `{"name":"a","pull_policy":["always",3]}`, "", "image.pull_policy"},
		{"image pull_policy object", `{"name":"a","pull_policy":{}}`, "", "image.pull_policy"},
		{"image docker string", `{"name":"a","docker":"root"}`, "", "image.docker"},
		{"image docker unknown key", `{"name":"a","docker":{"user":"1","privileged":true}}`, "", "image.docker.privileged"},
		{"image docker platform", `{"name":"a","docker":{"platform":"linux/arm64"}}`, "", "image.docker.platform"},
		{"image user negative", `{"name":"a","docker":{"user":-1}}`, "", "image.docker.user"},
		{"image user fraction", `{"name":"a","docker":{"user":1.5}}`, "", "image.docker.user"},
		{"image user exponent", `{"name":"a","docker":{"user":1e3}}`, "", "image.docker.user"},
		{"image user bool", `{"name":"a","docker":{"user":true}}`, "", "image.docker.user"},
		{"image user empty", `{"name":"a","docker":{"user":""}}`, "", "image.docker.user"},
		{"image user space", `{"name":"a","docker":{"user":"a b"}}`, "", "image.docker.user"},
		{"image user too long", `{"name":"a","docker":{"user":"` + strings.Repeat("u", maxImageUser+1) + `"}}`, "", "image.docker.user"},

		// Rejected: services.
		{"services string", "", `"redis"`, "services"},
		{"services object", "", `{"name":"redis"}`, "services"},
		{"65 services", "", many(65), "services"},
		{"service null", "", `[null]`, "services[0]"},
		{"service number", "", `["redis",5]`, "services[1]"},
		{"service empty name", "", `[""]`, "services[0]"},
		{"service name control", "", `["re\u007fdis"]`, "services[0]"},
		{"service object no name", "", `["redis",{"alias":"x"}]`, "services[1].name"},
		{"service unknown key", "", `[{"name":"r","docker":{"user":"1"}}]`, "services[0].docker"},
		{"service ports", "", `[{"name":"r","ports":[6379]}]`, "services[0].ports"},
		{"service alias semicolon", "", `[{"name":"r","alias":"a;b"}]`, "services[0].alias"},
		{"service alias slash", "", `[{"name":"r","alias":"a/b"}]`, "services[0].alias"},
		{"service alias tab", "", `[{"name":"r","alias":"a\tb"}]`, "services[0].alias"},
		{"service alias separators only", "", `[{"name":"r","alias":" , "}]`, "services[0].alias"},
		{"service alias too long", "", `[{"name":"r","alias":"` + strings.Repeat("a", maxAlias+1) + `"}]`, "services[0].alias"},
		{"service alias list too long", "", `[{"name":"r","alias":"` + strings.Repeat("a ", maxAliases/2+1) + `"}]`, "services[0].alias"},
		{"service alias array", "", `[{"name":"r","alias":["a"]}]`, "services[0].alias"},
		{"service command string", "", `[{"name":"r","command":"redis-server"}]`, "services[0].command"},
		{"service command NUL", "", `[{"name":"r","command":["a","\u0000"]}]`, "services[0].command[1]"},
		{"service entrypoint number", "", `[{"name":"r","entrypoint":[1]}]`, "services[0].entrypoint"},
		{"service variables object", "", `[{"name":"r","variables":{"A":"b"}}]`, "services[0].variables"},
		{"service variable string", "", `[{"name":"r","variables":["A=b"]}]`, "services[0].variables[0]"},
		{"service variable null", "", `[{"name":"r","variables":[null]}]`, "services[0].variables[0]"},
		{"service variable bad key", "", `[{"name":"r","variables":[{"key":"A","value":"1"},{"key":"1A","value":"v"}]}]`, "services[0].variables[1].key"},
		{"service variable no key", "", `[{"name":"r","variables":[{"value":"v"}]}]`, "services[0].variables[0].key"},
		{"service variable unknown key", "", `[{"name":"r","variables":[{"key":"A","value":"v","masked":true}]}]`, "services[0].variables[0].masked"},
		{"service variable value number", "", `[{"name":"r","variables":[{"key":"A","value":5}]}]`, "services[0].variables[0].value"},
		{"service variable value NUL", "", `[{"name":"r","variables":[{"key":"A","value":"\u0000"}]}]`, "services[0].variables[0].value"},
		{"service pull_policy unknown", "", `[{"name":"r","pull_policy":["if_not_present"]}]`, "services[0].pull_policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"name":"a","script":["x"]`
			if tc.image != "" {
				body += `,"image":` + tc.image
			}
			if tc.services != "" {
				body += `,"services":` + tc.services
			}
			body += "}"
			resp, b := e.admin("POST", "/api/v1/jobs", body)
			if tc.field == "" {
				if resp.StatusCode != 201 {
					t.Fatalf("POST /api/v1/jobs = %d %s, want 201", resp.StatusCode, b)
				}
				return
			}
			if resp.StatusCode != 400 {
				t.Fatalf("POST /api/v1/jobs = %d %s, want 400", resp.StatusCode, b)
			}
			var ae runnerapi.APIError
			e.decode(b, &ae)
			if ae.Error == "" || ae.Field != tc.field {
				t.Errorf("error body %s: want field %q", b, tc.field)
			}
		})
	}
}

// TestImageServicesRoundTrip submits a job with every image and service
// field and checks that each arrives in the jobs/request payload, and in
// the admin view.
func TestImageServicesRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	j := e.submit(map[string]any{
		"image": map[string]any{
			"name": "golang:1.26", "entrypoint": []string{"/bin/sh", "-c"},
			"pull_policy": []string{"if-not-present", "always", "if-not-present"},
			"docker":      map[string]any{"user": 1000},
		},
		"services": []any{
			"redis:7",
			map[string]any{
				"name": "postgres:17", "alias": "db, pg primary",
				"command": []string{"postgres", "-c", "fsync=off"}, "entrypoint": []string{"docker-entrypoint.sh"},
				"variables":   []map[string]string{{"key": "POSTGRES_PASSWORD", "value": "pw"}, {"key": "PGDATA", "value": "/tmp/pg"}},
				"pull_policy": "never",
			},
		},
	})
	if j.Image != "golang:1.26" || !cmp.Equal(j.Services, []string{"redis:7", "postgres:17"}) {
		t.Errorf("submit answer image %q services %q", j.Image, j.Services)
	}
	if got := e.job(j.ID); got.Image != "golang:1.26" || !cmp.Equal(got.Services, []string{"redis:7", "postgres:17"}) {
		t.Errorf("GET job: image %q services %q", got.Image, got.Services)
	}

	// The raw payload: the keys as GitLab names them.
	resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok},
		api.JobRequest{Token: tok, Info: api.VersionInfo{Features: api.FeaturesInfo{Image: true, Services: true}}})
	if resp.StatusCode != 201 {
		t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
	}
	var raw struct {
		Image    json.RawMessage   `json:"image"`
		Services []json.RawMessage `json:"services"`
	}
	e.decode(b, &raw)
	wantImage := `{"name":"golang:1.26","entrypoint":["/bin/sh","-c"],"pull_policy":["if-not-present","always"],"executor_opts":{"docker":{"user":"1000"}}}`
	if string(raw.Image) != wantImage {
		t.Errorf("payload image\n got %s\nwant %s", raw.Image, wantImage)
	}
	wantServices := []string{
		`{"name":"redis:7"}`,
		`{"name":"postgres:17","alias":"db, pg primary","command":["postgres","-c","fsync=off"],"entrypoint":["docker-entrypoint.sh"],` +
			`"variables":[{"key":"POSTGRES_PASSWORD","value":"pw","public":false,"file":false,"masked":false,"raw":false},` +
			`{"key":"PGDATA","value":"/tmp/pg","public":false,"file":false,"masked":false,"raw":false}],"pull_policy":["never"]}`,
	}
	if len(raw.Services) != len(wantServices) {
		t.Fatalf("payload services = %s", raw.Services)
	}
	for i, w := range wantServices {
		if string(raw.Services[i]) != w {
			t.Errorf("payload services[%d]\n got %s\nwant %s", i, raw.Services[i], w)
		}
	}

	// And decoded as a runner does.
	var jr api.JobResponse
	e.decode(b, &jr)
	want := api.Image{
		Name: "golang:1.26", Entrypoint: []string{"/bin/sh", "-c"}, PullPolicy: []string{"if-not-present", "always"},
		ExecutorOpts: &api.ImageExecutorOpts{Docker: &api.ImageDockerOpts{User: "1000"}},
	}
	if d := cmp.Diff(want, jr.Image); d != "" {
		t.Errorf("image (-want +got):\n%s", d)
	}
	wantSvc := []api.Image{
		{Name: "redis:7"},
		{
			Name: "postgres:17", Alias: "db, pg primary", Command: []string{"postgres", "-c", "fsync=off"},
			Entrypoint: []string{"docker-entrypoint.sh"}, PullPolicy: []string{"never"},
			Variables: api.Variables{{Key: "POSTGRES_PASSWORD", Value: "pw"}, {Key: "PGDATA", Value: "/tmp/pg"}},
		},
	}
	if d := cmp.Diff(wantSvc, jr.Services); d != "" {
		t.Errorf("services (-want +got):\n%s", d)
	}
}

// TestImageStringStillPlain checks that a job submitted the old way (image
// and services as names) gives the same payload as before.
func TestImageStringStillPlain(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	e.submit(map[string]any{"image": "alpine:3", "services": []string{"redis"}})
	e.submit(nil)
	resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok},
		api.JobRequest{Token: tok, Info: api.VersionInfo{Features: api.FeaturesInfo{Image: true, Services: true}}})
	if resp.StatusCode != 201 || !strings.Contains(string(b), `"image":{"name":"alpine:3"},"services":[{"name":"redis"}]`) {
		t.Errorf("jobs/request = %d %s", resp.StatusCode, b)
	}
	_, b = e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok},
		api.JobRequest{Token: tok, Info: api.VersionInfo{Features: api.FeaturesInfo{Image: true, Services: true}}})
	if !strings.Contains(string(b), `"image":{"name":""},"services":[]`) {
		t.Errorf("no image: %s", b)
	}
}

// TestImageFromOldRecord checks the payload of a job stored before the
// spec kept the image: the name comes from the image column.
func TestImageFromOldRecord(t *testing.T) {
	got := payloadImage(store.ImageSpec{Name: "alpine"})
	if d := cmp.Diff(api.Image{Name: "alpine"}, got); d != "" {
		t.Errorf("payloadImage (-want +got):\n%s", d)
	}
	var spec store.JobSpec
	if err := json.Unmarshal([]byte(`{"script":["x"],"services":["redis","pg"],"git":{}}`), &spec); err != nil {
		t.Fatal(err)
	}
	j := store.Job{ID: 1, Name: "old", Project: "a/b", Image: "alpine", Spec: spec}
	c := newEnv(t, nil).c
	jr := c.payload(httptest.NewRequest("POST", "/api/v4/jobs/request", nil), store.Runner{ID: 1}, &j, "glcbt-x", 0)
	if jr.Image.Name != "alpine" || len(jr.Services) != 2 || jr.Services[1].Name != "pg" {
		t.Errorf("payload image %+v services %+v", jr.Image, jr.Services)
	}
	if v := c.jobView(t.Context(), &j); !cmp.Equal(v.Services, []string{"redis", "pg"}) || v.Image != "alpine" {
		t.Errorf("jobView image %q services %q", v.Image, v.Services)
	}
}
