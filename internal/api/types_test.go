package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageDockerUser(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{`{"user":"1000:1000"}`, "1000:1000", false},
		{`{"user":1000}`, "1000", false},
		{`{"user":0}`, "0", false},
		{`{"user":-5}`, "-5", false},
		{`{"user":null}`, "", false},
		{`{}`, "", false},
		{`{"user":1.5}`, "", true},
		{`{"user":true}`, "", true},
		{`{"user":["root"]}`, "", true},
	} {
		var o ImageDockerOpts
		err := json.Unmarshal([]byte(tc.in), &o)
		if (err != nil) != tc.err || o.User != tc.want {
			t.Errorf("Unmarshal(%s) = %q, %v; want %q, error %v", tc.in, o.User, err, tc.want, tc.err)
		}
	}
}

func TestImageJSON(t *testing.T) {
	in := `{"name":"golang:1.26","alias":"a b","command":["c"],"entrypoint":[""],"ports":[{"number":80}],` +
		`"variables":[{"key":"K","value":"v","public":true,"file":false,"masked":false,"raw":false}],"pull_policy":["always"],` +
		`"executor_opts":{"docker":{"platform":"linux/arm64","user":1000},"kubernetes":{"user":"1"}}}`
	var img Image
	if err := json.Unmarshal([]byte(in), &img); err != nil {
		t.Fatal(err)
	}
	want := Image{
		Name: "golang:1.26", Alias: "a b", Command: []string{"c"}, Entrypoint: []string{""}, Ports: []Port{{Number: 80}},
		Variables: Variables{{Key: "K", Value: "v", Public: true}}, PullPolicy: []string{"always"},
		ExecutorOpts: &ImageExecutorOpts{Docker: &ImageDockerOpts{Platform: "linux/arm64", User: "1000"}},
	}
	if d := cmp.Diff(want, img); d != "" {
		t.Errorf("Unmarshal (-want +got):\n%s", d)
	}
	b, err := json.Marshal(img)
	if err != nil {
		t.Fatal(err)
	}
	out := `{"name":"golang:1.26","alias":"a b","command":["c"],"entrypoint":[""],"ports":[{"number":80}],` +
		`"variables":[{"key":"K","value":"v","public":true,"file":false,"masked":false,"raw":false}],"pull_policy":["always"],` +
		`"executor_opts":{"docker":{"platform":"linux/arm64","user":"1000"}}}`
	if string(b) != out {
		t.Errorf("Marshal =\n%s\nwant\n%s", b, out)
	}
	if b, _ := json.Marshal(Image{Name: "alpine"}); string(b) != `{"name":"alpine"}` {
		t.Errorf("Marshal name only = %s", b)
	}
}

func TestStringOrList(t *testing.T) {
	split := func(s string) []string { return strings.Split(s, ",") }
	for _, tc := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{`"a,b"`, []string{"a", "b"}, true},
		{` ["x", "y"] `, []string{"x", "y"}, true},
		{`[]`, []string{}, true},
		{`5`, nil, false},
		{`{"a":1}`, nil, false},
		{`[1]`, nil, false},
	} {
		got, ok := StringOrList([]byte(tc.in), split)
		if ok != tc.ok || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("StringOrList(%s) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
