package ciconfig

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"gopkg.in/yaml.v3"
)

// bigConfig is a 300-job configuration: 3 included files of templates,
// 100 jobs extending them (two levels), and 20 parallel:matrix jobs of 10
// combinations each.
func bigConfig() fstest.MapFS {
	fsys := fstest.MapFS{}
	var main strings.Builder
	main.WriteString("include:\n  - local: ci/*.yml\nstages: [build, test, deploy]\nvariables:\n  GLOBAL: g\n")
	for f := range 3 {
		var inc strings.Builder
		for t := range 10 {
			fmt.Fprintf(&inc, ".tpl-%d-%d:\n  extends: .root\n  image: alpine:3\n  variables:\n    T%d: \"%d\"\n  before_script: [echo before]\n  rules:\n    - if: $CI_COMMIT_BRANCH == \"main\"\n    - if: $CI_COMMIT_TAG\n      when: manual\n", f, t, t, t)
		}
		fsys[fmt.Sprintf("ci/part%d.yml", f)] = &fstest.MapFile{Data: []byte(inc.String())}
	}
	main.WriteString(".root:\n  tags: [linux]\n  retry: 1\n  cache: {key: deps, paths: [vendor/]}\n")
	for j := range 100 {
		fmt.Fprintf(&main, "job-%d:\n  extends: .tpl-%d-%d\n  stage: build\n  script:\n    - echo job %d\n    - make target-%d\n", j, j%3, j%10, j, j)
	}
	for j := range 20 {
		fmt.Fprintf(&main, "matrix-%d:\n  stage: test\n  needs: [job-%d]\n  script: [echo $A $B]\n  parallel:\n    matrix:\n      - A: [a1, a2, a3, a4, a5]\n        B: [b1, b2]\n", j, j)
	}
	fsys[".gitlab-ci.yml"] = &fstest.MapFile{Data: []byte(main.String())}
	return fsys
}

func BenchmarkCompile300Jobs(b *testing.B) {
	in := Input{FS: bigConfig(), Predefined: map[string]string{"CI_COMMIT_BRANCH": "main", "CI_COMMIT_REF_NAME": "main", "CI_PIPELINE_SOURCE": "push"}}
	p, err := Compile(in)
	if err != nil {
		b.Fatal(err)
	}
	if len(p.Jobs) != 300 {
		b.Fatalf("compiled %d jobs, want 300", len(p.Jobs))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBigConfig(t *testing.T) {
	in := Input{FS: bigConfig(), Predefined: map[string]string{"CI_COMMIT_BRANCH": "main", "CI_COMMIT_REF_NAME": "main"}}
	p, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Jobs) != 300 {
		t.Fatalf("compiled %d jobs, want 300", len(p.Jobs))
	}
	j := p.Job("job-13")
	if j.Image == nil || j.Image.Name != "alpine:3" || j.Tags[0] != "linux" || j.Retry.Max != 1 || j.Cache[0].Key != "deps" {
		t.Errorf("job-13 = %+v: want the image, tags, retry and cache of its templates", j)
	}
	if m := p.Job("matrix-3: [a2, b1]"); m == nil || m.Needs[0].Job != "job-3" {
		t.Errorf("matrix-3: [a2, b1] = %+v", m)
	}
}

// BenchmarkYAMLDecode300Jobs is the floor of BenchmarkCompile300Jobs: the
// same four files decoded by yaml.v3 into maps, with no GitLab semantics.
func BenchmarkYAMLDecode300Jobs(b *testing.B) {
	fsys := bigConfig()
	b.ReportAllocs()
	for b.Loop() {
		for _, name := range []string{".gitlab-ci.yml", "ci/part0.yml", "ci/part1.yml", "ci/part2.yml"} {
			var m map[string]any
			if err := yaml.Unmarshal(fsys[name].Data, &m); err != nil {
				b.Fatal(err)
			}
		}
	}
}
