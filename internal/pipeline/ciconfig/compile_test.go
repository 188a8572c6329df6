package ciconfig

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func branchInput(files map[string]string) Input {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return Input{FS: fsys, Predefined: map[string]string{
		"CI_COMMIT_BRANCH": "main", "CI_COMMIT_REF_NAME": "main", "CI_DEFAULT_BRANCH": "main",
		"CI_PIPELINE_SOURCE": "push",
	}}
}

func compileString(t *testing.T, yml string, extra map[string]string) (*Pipeline, error) {
	t.Helper()
	files := map[string]string{".gitlab-ci.yml": yml}
	for k, v := range extra {
		files[k] = v
	}
	return Compile(branchInput(files))
}

func names(p *Pipeline) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.Name)
	}
	return out
}

func TestCompileBasics(t *testing.T) {
	p, err := compileString(t, `
stages: [build, test, deploy]
variables:
  GLOBAL: g
  REF: "$GLOBAL-x"
default:
  image: alpine:3
  before_script: [echo before]
.base: &base
  tags: [linux]
  script:
    - echo base
build:
  <<: *base
  stage: build
  artifacts:
    paths: [out/]
    reports:
      dotenv: build.env
test:
  extends: .base
  parallel:
    matrix:
      - OS: [linux, mac]
        ARCH: amd64
  needs: [build]
  script:
    - echo test $OS
    - [echo nested, echo again]
deploy:
  stage: deploy
  image: debian
  script: echo deploy
  when: manual
  rules:
    - if: $CI_COMMIT_BRANCH == "main"
      when: manual
      variables: {TARGET: prod}
    - when: never
never:
  script: echo never
  rules:
    - if: $CI_COMMIT_TAG
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(names(p), ",")
	if want := "build,test: [linux, amd64],test: [mac, amd64],deploy"; got != want {
		t.Fatalf("jobs = %s, want %s", got, want)
	}
	b := p.Job("build")
	if b.Stage != "build" || b.Image == nil || b.Image.Name != "alpine:3" || strings.Join(b.BeforeScript, ";") != "echo before" || b.Tags[0] != "linux" {
		t.Errorf("build = %+v", b)
	}
	if b.Artifacts == nil || b.Artifacts.Reports["dotenv"][0] != "build.env" {
		t.Errorf("build artifacts = %+v", b.Artifacts)
	}
	tj := p.Job("test: [mac, amd64]")
	if strings.Join(tj.Script, ";") != "echo test $OS;echo nested;echo again" {
		t.Errorf("test script = %q", tj.Script)
	}
	if len(tj.Needs) != 1 || tj.Needs[0].Job != "build" || !tj.Needs[0].Artifacts {
		t.Errorf("test needs = %+v", tj.Needs)
	}
	if tj.NodeIndex != 2 || tj.NodeTotal != 2 || tj.Matrix["OS"] != "mac" {
		t.Errorf("test node = %d/%d %v", tj.NodeIndex, tj.NodeTotal, tj.Matrix)
	}
	d := p.Job("deploy")
	if d.When != "manual" || d.AllowFailure || d.Image.Name != "debian" {
		t.Errorf("deploy = when %s allow_failure %v image %v", d.When, d.AllowFailure, d.Image)
	}
	if v := d.Variables[len(d.Variables)-1]; v.Key != "TARGET" || v.Value != "prod" {
		t.Errorf("deploy's last variable = %+v, want TARGET=prod from its rule", v)
	}
}

func TestCompileErrors(t *testing.T) {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 12 {
		name := string(rune('b' + i))
		bomb += name + ": &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	bomb += "job:\n  script: [echo]\n"
	for _, tc := range []struct {
		name  string
		yml   string
		extra map[string]string
		want  []string // substrings, each in the error
		is    error
	}{
		{"needs cycle", `
a: {script: [x], needs: [b]}
b: {script: [x], needs: [a]}`, nil, []string{"The pipeline has circular dependencies: a → b → a"}, nil},
		{"extends cycle", `
.a: {extends: .b}
.b: {extends: .a}
j: {extends: .a, script: [x]}`, nil, []string{"circular dependency detected in `extends`"}, nil},
		{"missing need", `j: {script: [x], needs: [nope]}`, nil, []string{".gitlab-ci.yml:1: j job: undefined need: nope"}, nil},
		{"later stage need", `
a: {stage: build, script: [x], needs: [b]}
b: {stage: deploy, script: [x]}`, nil, []string{"a job: need b is not defined in current or prior stages"}, nil},
		{"missing include", "include: nope.yml\nj: {script: [x]}", nil, []string{".gitlab-ci.yml:1: include local file `nope.yml` does not exist"}, nil},
		{"traversal include", "include: ../../etc/passwd.yml\nj: {script: [x]}", nil, []string{"not a path inside the repository"}, nil},
		{"dangling reference", "j:\n  script: !reference [.nope, script]", nil, []string{".gitlab-ci.yml:2: j:script !reference [.nope, script] could not be found"}, nil},
		{"no script", "j: {stage: test}", nil, []string{".gitlab-ci.yml:1: jobs:j config should implement the script:, run:, or trigger: keyword"}, nil},
		{"matrix too big", `
j:
  script: [x]
  parallel:
    matrix:
      - A: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]
        B: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]`, nil, []string{"more than 200 jobs"}, nil},
		{"yaml bomb", bomb, nil, []string{"too many values"}, ErrTooLarge},
		{"unknown keys, all in one run", `
a: {script: [x], scirpt: [y]}
b: {script: [x], stage: nope}
c: {script: [x], rules: [{if: '${X} == "1"'}]}`, nil, []string{
			".gitlab-ci.yml:2: jobs:a config contains unknown keys: scirpt",
			".gitlab-ci.yml:3: b job: chosen stage nope does not exist",
			".gitlab-ci.yml:4: jobs:c:rules:rule if invalid expression syntax"}, nil},
		{"rules excluded everything", "j: {script: [x], rules: [{if: $NOPE}]}", nil, nil, ErrNoJobs},
		{"workflow", "workflow: {rules: [{if: $NOPE}]}\nj: {script: [x]}", nil, nil, ErrFiltered},
		{"bad yaml", "j: {script: [x]\n", nil, []string{".gitlab-ci.yml:"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileString(t, tc.yml, tc.extra)
			if err == nil {
				t.Fatal("Compile = nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Compile = %v\nwant it to contain %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Compile = %v, want errors.Is %v", err, tc.is)
			}
		})
	}
}

// TestCompileCoverage: coverage: is a regex between slashes with GitLab's
// flags after them; the job gets it in Go syntax.
func TestCompileCoverage(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{`/^\s*Lines:\s*(\d+.\d+)\%/`, `^\s*Lines:\s*(\d+.\d+)\%`, ""},
		{`/Total: (\d+)%/i`, `(?i)Total: (\d+)%`, ""},
		{`/a/b/ms`, `(?ms)a/b`, ""},
		{`//`, ``, ""},
		{`Coverage: \d+%`, "", "must be a regular expression between slashes"},
		{`/\d+%/g`, "", "must be a regular expression between slashes"},
		{`/(\d+%/`, "", "invalid regular expression"},
		{`/(?<=x)\d+/`, "", "invalid regular expression"}, // RE2 has no look-behind
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := compileString(t, "j:\n  script: [x]\n  coverage: '"+tc.in+"'\n", nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Compile = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Job("j").Coverage; got != tc.want {
				t.Errorf("Coverage = %q, want %q", got, tc.want)
			}
		})
	}
}
