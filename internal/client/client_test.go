package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageServiceJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"image name only", Image{Name: "alpine"}, `"alpine"`},
		{"image empty entrypoint is unset", Image{Name: "alpine", Entrypoint: []string{}}, `"alpine"`},
		{"image entrypoint", Image{Name: "alpine", Entrypoint: []string{""}}, `{"name":"alpine","entrypoint":[""]}`},
		{"image full", Image{Name: "a", Entrypoint: []string{"sh"}, PullPolicy: PullPolicies{"always"}, Docker: &ImageDocker{User: "1000"}},
			`{"name":"a","entrypoint":["sh"],"pull_policy":["always"],"docker":{"user":"1000"}}`},
		{"service name only", Service{Name: "redis"}, `"redis"`},
		{"service alias", Service{Name: "redis", Alias: "cache db"}, `{"name":"redis","alias":"cache db"}`},
		{"service full", Service{Name: "pg", Alias: "db", Command: []string{"postgres"}, Entrypoint: []string{"e"},
			Variables: []ServiceVariable{{Key: "K", Value: "v"}}, PullPolicy: PullPolicies{"never"}},
			`{"name":"pg","alias":"db","command":["postgres"],"entrypoint":["e"],"variables":[{"key":"K","value":"v"}],"pull_policy":["never"]}`},
		{"spec", JobSpec{Name: "j", Script: []string{"x"}, Image: &Image{Name: "alpine"}, Services: []Service{{Name: "redis"}, {Name: "pg", Alias: "db"}}},
			`{"name":"j","script":["x"],"image":"alpine","services":["redis",{"name":"pg","alias":"db"}]}`},
		{"spec without image", JobSpec{Name: "j", Script: []string{"x"}}, `{"name":"j","script":["x"]}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: Marshal = %s, %v; want %s", tc.name, b, err, tc.want)
		}
	}

	for _, tc := range []struct {
		in   string
		want Service
		err  bool
	}{
		{`"redis:7"`, Service{Name: "redis:7"}, false},
		{`{"name":"redis:7","alias":"a b","pull_policy":"always"}`, Service{Name: "redis:7", Alias: "a b", PullPolicy: PullPolicies{"always"}}, false},
		{`{"name":"r","pull_policy":["always","never"],"variables":[{"key":"K","value":"v"}]}`,
			Service{Name: "r", PullPolicy: PullPolicies{"always", "never"}, Variables: []ServiceVariable{{Key: "K", Value: "v"}}}, false},
		{`{"name":"r","aliases":"x"}`, Service{}, true},
		{`{"name":"r","pull_policy":5}`, Service{}, true},
		{`5`, Service{}, true},
		{`["r"]`, Service{}, true},
	} {
		s := Service{Alias: "stale"}
		err := json.Unmarshal([]byte(tc.in), &s)
		if (err != nil) != tc.err {
			t.Errorf("Unmarshal(%s) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if d := cmp.Diff(tc.want, s); !tc.err && d != "" {
			t.Errorf("Unmarshal(%s) (-want +got):\n%s", tc.in, d)
		}
	}
	var img Image
	if err := json.Unmarshal([]byte(`{"name":"a","docker":{"user":"1"}}`), &img); err != nil || img.Docker == nil || img.Docker.User != "1" {
		t.Errorf("Unmarshal image = %+v, %v", img, err)
	}
	if err := json.Unmarshal([]byte(`"b"`), &img); err != nil || !cmp.Equal(img, Image{Name: "b"}) {
		t.Errorf("Unmarshal image string = %+v, %v", img, err)
	}
}

func TestSubmitSendsObjects(t *testing.T) {
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":7,"status":"pending","image":"alpine","services":["redis","pg"]}`)
	}))
	defer srv.Close()
	c := New(srv.URL, "tok", nil)
	j, err := c.Submit(t.Context(), JobSpec{Name: "j", Script: []string{"x"},
		Image:    &Image{Name: "alpine", PullPolicy: PullPolicies{"never"}},
		Services: []Service{{Name: "redis"}, {Name: "pg", Alias: "db"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"j","script":["x"],"image":{"name":"alpine","pull_policy":["never"]},"services":["redis",{"name":"pg","alias":"db"}]}`
	if string(body) != want {
		t.Errorf("body = %s\nwant %s", body, want)
	}
	if j.ID != 7 || j.Image != "alpine" || !cmp.Equal(j.Services, []string{"redis", "pg"}) {
		t.Errorf("job = %+v", j)
	}
}
