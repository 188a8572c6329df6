package coordinator

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/google/go-cmp/cmp"
)

// TestSubmitArtifactsValidation: bad cache, artifacts and dependencies are
// 400 naming the field.
func TestSubmitArtifactsValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name      string
		spec      map[string]any
		wantField string
	}{
		{"cache not an object", map[string]any{"cache": 3}, "cache"},
		{"too many caches", map[string]any{"cache": []any{map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}}}, "cache"},
		{"cache entry not an object", map[string]any{"cache": []any{"x"}}, "cache[0]"},
		{"bad policy", map[string]any{"cache": []any{map[string]any{"key": "a"}, map[string]any{"key": "b", "policy": "pull-only"}}}, "cache[1].policy"},
		{"bad policy, one object", map[string]any{"cache": map[string]any{"policy": "x"}}, "cache.policy"},
		{"bad when", map[string]any{"cache": map[string]any{"when": "sometimes"}}, "cache.when"},
		{"key with a slash", map[string]any{"cache": map[string]any{"key": "a/b"}}, "cache.key"},
		{"key with an encoded slash", map[string]any{"cache": map[string]any{"key": "a%2Fb"}}, "cache.key"},
		{"key ..", map[string]any{"cache": map[string]any{"key": ".."}}, "cache.key"},
		{"key a number", map[string]any{"cache": map[string]any{"key": 3}}, "cache.key"},
		{"key files missing", map[string]any{"cache": map[string]any{"key": map[string]any{"prefix": "p"}}}, "cache.key.files"},
		{"key files too many", map[string]any{"cache": map[string]any{"key": map[string]any{"files": []string{"a", "b", "c"}}}}, "cache.key.files"},
		{"key unknown field", map[string]any{"cache": map[string]any{"key": map[string]any{"files": []string{"a"}, "hash": "x"}}}, "cache.key.hash"},
		{"key prefix with a slash", map[string]any{"cache": map[string]any{"key": map[string]any{"files": []string{"a"}, "prefix": "a/b"}}}, "cache.key.prefix"},
		{"bad fallback key", map[string]any{"cache": map[string]any{"fallback_keys": []string{"ok", "."}}}, "cache.fallback_keys[1]"},
		{"cache unknown field", map[string]any{"cache": map[string]any{"keys": "x"}}, "cache.keys"},
		{"empty cache path", map[string]any{"cache": map[string]any{"paths": []string{""}}}, "cache.paths[0]"},
		{"cache paths not a list", map[string]any{"cache": map[string]any{"paths": "x"}}, "cache.paths"},
		{"artifacts not an object", map[string]any{"artifacts": []string{"a"}}, "artifacts"},
		{"artifacts without paths", map[string]any{"artifacts": map[string]any{"name": "x"}}, "artifacts.paths"},
		{"bad expire_in", map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "expire_in": "soon"}}, "artifacts.expire_in"},
		{"bad artifacts when", map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "when": "never"}}, "artifacts.when"},
		{"unknown report", map[string]any{"artifacts": map[string]any{"reports": map[string]any{"bogus": "a"}}}, "artifacts.reports.bogus"},
		{"empty report", map[string]any{"artifacts": map[string]any{"reports": map[string]any{"junit": []string{}}}}, "artifacts.reports.junit"},
		{"artifacts unknown field", map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "expires": "1d"}}, "artifacts.expires"},
		{"artifacts name with a slash", map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "name": "a/b"}}, "artifacts.name"},
		{"exclude empty", map[string]any{"artifacts": map[string]any{"paths": []string{"a"}, "exclude": []string{""}}}, "artifacts.exclude[0]"},
		{"dependency negative", map[string]any{"dependencies": []any{-1}}, "dependencies[0]"},
		{"dependency object", map[string]any{"dependencies": []any{"a", map[string]any{}}}, "dependencies[1]"},
		{"dependency empty name", map[string]any{"dependencies": []any{""}}, "dependencies[0]"},
		{"dependency unknown id", map[string]any{"dependencies": []any{12345}}, "dependencies[0]"},
		{"dependency unknown name", map[string]any{"dependencies": []any{"nope"}}, "dependencies[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"name": "j", "script": []string{"true"}}
			for k, v := range tc.spec {
				spec[k] = v
			}
			resp, b := e.admin("POST", "/api/v1/jobs", spec)
			var ae struct{ Error, Field string }
			json.Unmarshal(b, &ae)
			if resp.StatusCode != http.StatusBadRequest || ae.Field != tc.wantField {
				t.Errorf("submit = %d %s; want 400 naming %s", resp.StatusCode, b, tc.wantField)
			}
		})
	}
}

// TestSubmitDependencies: how dependencies resolve, by id and by name.
func TestSubmitDependencies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	old := e.running(tok, map[string]any{"name": "build", "project": "g/p"})
	e.succeed(old)
	other := e.running(tok, map[string]any{"name": "build", "project": "g/other"})
	e.succeed(other)
	submit := func(deps ...any) (int, string) {
		// Tagged: the untagged runner that runs the builds leaves them.
		resp, b := e.admin("POST", "/api/v1/jobs", map[string]any{"name": "test", "project": "g/p", "script": []string{"true"}, "dependencies": deps, "tags": []string{"t"}})
		var ae struct{ Error string }
		json.Unmarshal(b, &ae)
		return resp.StatusCode, ae.Error
	}
	if code, msg := submit("build", old.ID, "build"); code != http.StatusCreated {
		t.Fatalf("submit with a succeeded dependency = %d %s", code, msg)
	}
	if code, msg := submit(other.ID); code != http.StatusBadRequest {
		t.Errorf("dependency of another project = %d %s, want 400", code, msg)
	}
	// A newer build is running: "build" names it, and it has not succeeded.
	newer := e.running(tok, map[string]any{"name": "build", "project": "g/p"})
	if code, msg := submit("build"); code != http.StatusBadRequest {
		t.Errorf("dependency whose newest job runs = %d %s, want 400", code, msg)
	}
	if code, msg := submit(old.ID); code != http.StatusCreated {
		t.Errorf("dependency by the id of an older success = %d %s, want 201", code, msg)
	}
	e.succeed(newer)
	if code, msg := submit("build"); code != http.StatusCreated {
		t.Errorf("dependency whose newest job succeeded = %d %s, want 201", code, msg)
	}
	// The test jobs, in the order submitted.
	_, tagged := e.runner(map[string]any{"tag_list": []string{"t"}})
	var deps [][]api.Dependency
	for {
		resp, jr := e.request(tagged, "", api.FeaturesInfo{})
		if resp.StatusCode != http.StatusCreated {
			break
		}
		deps = append(deps, jr.Dependencies)
	}
	want := [][]api.Dependency{
		{{ID: old.ID, Name: "build"}},
		{{ID: old.ID, Name: "build"}},
		{{ID: newer.ID, Name: "build"}},
	}
	for _, ds := range deps {
		for i := range ds {
			ds[i].Token = ""
		}
	}
	if d := cmp.Diff(want, deps); d != "" {
		t.Errorf("payload dependencies (-want +got):\n%s", d)
	}
}

// TestPayloadCacheArtifacts: the spec's cache and artifacts in GitLab's
// payload shape.
func TestPayloadCacheArtifacts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	jr := e.running(tok, map[string]any{
		"cache": []any{
			map[string]any{"key": "deps", "paths": []string{"vendor/"}, "policy": "pull", "fallback_keys": []string{"main"}},
			map[string]any{"key": map[string]any{"files": []string{"go.sum"}, "prefix": "go"}, "paths": []string{".cache/"}, "untracked": true, "when": "always", "unprotect": true},
		},
		"artifacts": map[string]any{
			"name": "bin", "paths": []string{"bin/"}, "exclude": []string{"bin/*.o"}, "expire_in": "3 days",
			"reports": map[string]any{"junit": "report.xml", "dotenv": []string{"a.env", "b.env"}},
		},
	})
	wantCache := []api.Cache{
		{Key: "deps", Policy: "pull", Paths: []string{"vendor/"}, When: "on_success", FallbackKeys: []string{"main"}},
		{Key: "go", KeyFiles: []string{"go.sum"}, KeyPrefix: "go", Untracked: true, Policy: "pull-push", Paths: []string{".cache/"}, When: "always"},
	}
	if d := cmp.Diff(wantCache, jr.Cache); d != "" {
		t.Errorf("payload cache (-want +got):\n%s", d)
	}
	wantArtifacts := []api.Artifact{
		{Name: "bin", Paths: []string{"bin/"}, Exclude: []string{"bin/*.o"}, When: "on_success", Type: "archive", Format: "zip", ExpireIn: "3 days"},
		{Name: ".env", Paths: []string{"a.env", "b.env"}, When: "always", Type: "dotenv", Format: "gzip", ExpireIn: "3 days"},
		{Name: "junit.xml", Paths: []string{"report.xml"}, When: "always", Type: "junit", Format: "gzip", ExpireIn: "3 days"},
	}
	if d := cmp.Diff(wantArtifacts, jr.Artifacts); d != "" {
		t.Errorf("payload artifacts (-want +got):\n%s", d)
	}
	// Nothing asked: empty lists, as GitLab sends them.
	plain := e.running(tok, nil)
	if plain.Cache == nil || len(plain.Cache) != 0 || plain.Artifacts == nil || len(plain.Artifacts) != 0 || plain.Dependencies == nil || len(plain.Dependencies) != 0 {
		t.Errorf("payload of a plain job: cache %v, artifacts %v, dependencies %v; want empty lists", plain.Cache, plain.Artifacts, plain.Dependencies)
	}
}

// FuzzArtifactsSpec: the cache and artifacts parsers never panic, and
// what they accept has the defaults filled in.
func FuzzArtifactsSpec(f *testing.F) {
	for _, s := range []string{
		`{"key":"a","paths":["x"],"policy":"pull"}`,
		`[{"key":{"files":["go.sum"],"prefix":"p"}}]`,
		`{"paths":["bin/"],"expire_in":"1 week","reports":{"junit":"r.xml"}}`,
		`{"reports":{"dotenv":["a","b"]},"when":"always"}`,
		`[]`, `null`, `3`, `"x"`, `[{}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		if cs, e := parseCache(b); e == nil {
			for _, c := range cs {
				if c.Policy == "" || c.When == "" || (c.Key == "" && len(c.KeyFiles) == 0) {
					t.Fatalf("parseCache(%s) = %+v: defaults missing", b, c)
				}
			}
		}
		if a, e := parseArtifacts(b); e == nil && a != nil {
			if a.When == "" || (len(a.Paths) == 0 && !a.Untracked && len(a.Reports) == 0) {
				t.Fatalf("parseArtifacts(%s) = %+v", b, a)
			}
			for _, p := range payloadArtifacts(a) {
				if p.Type == "" || p.Format == "" {
					t.Fatalf("payloadArtifacts(%+v) = %+v", a, p)
				}
			}
		}
	})
}
