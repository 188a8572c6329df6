package ciconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/pipeline/corpustest"
)

// corpusDir holds gitlab-ci-local's test cases ported as data (see its
// README.md; the case files are under gitlab-ci-local's MIT license).
const corpusDir = "../testdata/gitlab-ci-local"

// Scenario is one scenario of a case's expect.yaml.
type Scenario = corpustest.Scenario

// expectedJob is what a scenario says about one job; nil fields are not
// checked.
type expectedJob struct {
	Stage        *string           `yaml:"stage"`
	When         *string           `yaml:"when"`
	AllowFailure *bool             `yaml:"allow_failure"`
	Needs        *[]string         `yaml:"needs"`
	BeforeScript *[]string         `yaml:"before_script"`
	Script       *[]string         `yaml:"script"`
	AfterScript  *[]string         `yaml:"after_script"`
	Variables    map[string]string `yaml:"variables"`
	Image        *string           `yaml:"image"`
	Environment  *struct {
		Name   string `yaml:"name"`
		URL    string `yaml:"url"`
		Action string `yaml:"action"`
	} `yaml:"environment"`
}

// corpusKnown are scenarios the compiler does not pass yet, with why.
// Each entry is a gap to close, not an accepted difference.
var corpusKnown = map[string]string{}

func loadCorpus(t testing.TB) []corpustest.Case {
	t.Helper()
	cases, err := corpustest.Load(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// scenarioInput is the compilation input of a scenario: the case's
// directory as the repository, on main (or the scenario's ref or tag).
func scenarioInput(dir string, s Scenario) Input {
	ref, tag := "main", false
	switch {
	case s.Tag != "":
		ref, tag = s.Tag, true
	case s.Ref != "":
		ref = s.Ref
	}
	pre := map[string]string{
		"CI": "true", "GITLAB_CI": "true", "CI_PIPELINE_SOURCE": "push",
		"CI_COMMIT_REF_NAME": ref, "CI_COMMIT_REF_SLUG": ref, "CI_DEFAULT_BRANCH": "main",
		"CI_COMMIT_SHA": "0123456789abcdef0123456789abcdef01234567", "CI_COMMIT_SHORT_SHA": "01234567",
		"CI_PROJECT_NAME": filepath.Base(dir), "CI_PROJECT_DIR": "/builds/" + filepath.Base(dir),
		"CI_JOB_ID": "1", "CI_PIPELINE_ID": "1", "CI_PIPELINE_IID": "1",
	}
	if tag {
		pre["CI_COMMIT_TAG"] = ref
	} else {
		pre["CI_COMMIT_BRANCH"] = ref
	}
	in := Input{FS: os.DirFS(dir), File: s.File, Predefined: pre, Variables: s.Variables}
	if s.Changed != nil {
		in.Changes = func(string) ([]string, bool, error) { return s.Changed, true, nil }
	}
	return in
}

// TestCorpus compiles every scenario of the ported gitlab-ci-local cases
// and checks what it says about the compiled pipeline: its jobs and their
// keys, the jobs rules leave out, and the errors. What a run prints is
// checked by drover exec's tests.
func TestCorpus(t *testing.T) {
	checked := 0
	for _, c := range loadCorpus(t) {
		for i, s := range c.Scenarios {
			id := fmt.Sprintf("%s/%d", c.Name, i)
			t.Run(id, func(t *testing.T) {
				if why, ok := corpusKnown[id]; ok {
					t.Skipf("%s (%s): known gap: %s", id, s.Name, why)
				}
				checked++
				checkScenario(t, c.Dir, s)
			})
		}
	}
	if checked < 150 {
		t.Errorf("checked %d scenarios, want at least 150", checked)
	}
}

func checkScenario(t *testing.T, dir string, s Scenario) {
	p, err := Compile(scenarioInput(dir, s))
	if err == nil && len(s.Select) > 0 {
		_, err = p.Select(s.Select, s.WithNeeds)
	}
	wantErrs := s.Errors
	if s.Error != "" {
		wantErrs = append(wantErrs, s.Error)
	}
	switch {
	case s.Filtered:
		if !errors.Is(err, ErrFiltered) {
			t.Fatalf("%s: Compile = %v, want the pipeline filtered out by workflow:rules", s.Name, err)
		}
		return
	case len(wantErrs) > 0:
		if err == nil {
			t.Fatalf("%s: Compile succeeded with jobs %v, want an error containing %q", s.Name, jobNames(p), wantErrs)
		}
		for _, w := range wantErrs {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Compile = %v\nwant it to contain %q", s.Name, err, w)
			}
		}
		return
	case errors.Is(err, ErrNoJobs) && len(s.Jobs) == 0:
		// Every job left out: what the scenario says is absent is.
		return
	case err != nil:
		t.Fatalf("%s: Compile = %v", s.Name, err)
	}
	for _, name := range s.Absent {
		if p.Job(name) != nil {
			t.Errorf("%s: job %q is in the pipeline, want it left out", s.Name, name)
		}
	}
	for name, keys := range s.AbsentVars {
		if j := p.Job(name); j != nil {
			for _, k := range keys {
				if slices.ContainsFunc(j.Variables, func(v Variable) bool { return v.Key == k }) {
					t.Errorf("%s: job %q has variable %s, want none", s.Name, name, k)
				}
			}
		}
	}
	for name, node := range s.Jobs {
		var want expectedJob
		if err := node.Decode(&want); err != nil {
			t.Fatalf("%s: jobs: %s: %v", s.Name, name, err)
		}
		j := p.Job(name)
		if j == nil {
			t.Errorf("%s: no job %q in the pipeline; it has %v", s.Name, name, jobNames(p))
			continue
		}
		checkJob(t, s.Name, j, want, p)
	}
}

func checkJob(t *testing.T, scenario string, j *Job, want expectedJob, p *Pipeline) {
	t.Helper()
	where := scenario + ": " + j.Name
	if want.Stage != nil && j.Stage != *want.Stage {
		t.Errorf("%s: stage = %q, want %q", where, j.Stage, *want.Stage)
	}
	if want.When != nil && j.When != *want.When {
		t.Errorf("%s: when = %q, want %q", where, j.When, *want.When)
	}
	if want.AllowFailure != nil && j.AllowFailure != *want.AllowFailure {
		t.Errorf("%s: allow_failure = %v, want %v", where, j.AllowFailure, *want.AllowFailure)
	}
	if want.Needs != nil {
		var got []string
		for _, n := range j.Needs {
			got = append(got, n.Job)
		}
		if !j.HasNeeds || !slices.Equal(got, *want.Needs) && !(len(got) == 0 && len(*want.Needs) == 0) {
			t.Errorf("%s: needs = %v (set: %v), want %v", where, got, j.HasNeeds, *want.Needs)
		}
	}
	lines := func(key string, got []string, want *[]string) {
		if want != nil && !slices.Equal(got, *want) && !(len(got) == 0 && len(*want) == 0) {
			t.Errorf("%s: %s = %q, want %q", where, key, got, *want)
		}
	}
	lines("before_script", j.BeforeScript, want.BeforeScript)
	lines("script", j.Script, want.Script)
	lines("after_script", j.AfterScript, want.AfterScript)
	if want.Variables != nil {
		// The value a job sees: predefined, global, job, rule and
		// matrix variables, pipeline variables over them, expanded as
		// the runner expands them.
		sc := (&scope{}).pushMap(map[string]string{"CI_PROJECT_DIR": "/builds/x"}).push(j.Variables)
		for k, v := range want.Variables {
			got, ok := sc.get(k)
			if !ok || got != v {
				t.Errorf("%s: variable %s = %q (defined: %v), want %q", where, k, got, ok, v)
			}
		}
	}
	if want.Image != nil && (j.Image == nil || j.Image.Name != *want.Image) {
		t.Errorf("%s: image = %+v, want %q", where, j.Image, *want.Image)
	}
	if want.Environment != nil {
		e := j.Environment
		if e == nil || e.Name != want.Environment.Name || want.Environment.URL != "" && e.URL != want.Environment.URL ||
			want.Environment.Action != "" && e.Action != want.Environment.Action {
			t.Errorf("%s: environment = %+v, want %+v", where, e, *want.Environment)
		}
	}
}

func jobNames(p *Pipeline) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.Name)
	}
	return out
}
