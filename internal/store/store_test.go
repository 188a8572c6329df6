package store

import (
	"encoding/json"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/google/go-cmp/cmp"
)

func TestImageSpecJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ImageSpec
		err  bool
	}{
		{`"redis:7"`, ImageSpec{Name: "redis:7"}, false},
		{` "a" `, ImageSpec{Name: "a"}, false},
		{`{"name":"pg","alias":"db","command":["c"],"entrypoint":[""],"variables":[{"key":"K","value":"v"}],"pull_policy":["never"],"docker_user":"1"}`,
			ImageSpec{Name: "pg", Alias: "db", Command: []string{"c"}, Entrypoint: []string{""},
				Variables: []api.Variable{{Key: "K", Value: "v"}}, PullPolicy: []string{"never"}, DockerUser: "1"}, false},
		{`{}`, ImageSpec{}, false},
		{`5`, ImageSpec{}, true},
		{`["a"]`, ImageSpec{}, true},
		{`{"name":1}`, ImageSpec{}, true},
	} {
		var got ImageSpec
		err := json.Unmarshal([]byte(tc.in), &got)
		if (err != nil) != tc.err {
			t.Errorf("Unmarshal(%s) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if d := cmp.Diff(tc.want, got); !tc.err && d != "" {
			t.Errorf("Unmarshal(%s) (-want +got):\n%s", tc.in, d)
		}
	}

	// Old documents: services as names, no image. New ones round-trip.
	var old JobSpec
	if err := json.Unmarshal([]byte(`{"script":["x"],"services":["a","b"],"git":{}}`), &old); err != nil {
		t.Fatal(err)
	}
	if want := []ImageSpec{{Name: "a"}, {Name: "b"}}; !cmp.Equal(want, old.Services) || !cmp.Equal(old.Image, ImageSpec{}) {
		t.Errorf("old spec = %+v", old)
	}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"script":["x"],"services":[{"name":"a"},{"name":"b"}],"git":{}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s (no image key when there is none)", b, want)
	}
	var again JobSpec
	if err := json.Unmarshal(b, &again); err != nil || !cmp.Equal(old, again) {
		t.Errorf("round trip = %+v, %v", again, err)
	}
}
