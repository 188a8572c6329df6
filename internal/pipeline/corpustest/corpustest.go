// Package corpustest reads the conformance corpus of
// internal/pipeline/testdata/gitlab-ci-local: gitlab-ci-local's test cases
// (MIT) with drover's expect.yaml beside each, whose format the corpus's
// README.md describes. The compiler's tests check what a scenario says
// about the compiled pipeline, drover exec's what it says about a run.
package corpustest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"
)

// Case is one case directory of the corpus.
type Case struct {
	Name      string // the directory's name, gitlab-ci-local's case name
	Dir       string
	Scenarios []Scenario
}

// Scenario is one scenario of a case's expect.yaml.
type Scenario struct {
	Name       string               `yaml:"name"`
	File       string               `yaml:"file"`
	Ref        string               `yaml:"ref"`
	Tag        string               `yaml:"tag"`
	Variables  map[string]string    `yaml:"variables"`
	Select     []string             `yaml:"select"`
	WithNeeds  bool                 `yaml:"with_needs"`
	Manual     []string             `yaml:"manual"`
	Changed    []string             `yaml:"changed"`
	Jobs       map[string]yaml.Node `yaml:"jobs"`
	Absent     []string             `yaml:"absent"`
	AbsentVars map[string][]string  `yaml:"absent_variables"`
	Error      string               `yaml:"error"`
	Errors     []string             `yaml:"errors"`
	Filtered   bool                 `yaml:"filtered"`
	Differs    string               `yaml:"differs"`

	Run       *Run `yaml:"run"`
	Rerun     *Run `yaml:"rerun"`
	Artifacts map[string]struct {
		Contains    []string `yaml:"contains"`
		NotContains []string `yaml:"not_contains"`
	} `yaml:"artifacts"`
	Caches map[string]struct {
		Contains []string `yaml:"contains"`
		Saved    *bool    `yaml:"saved"`
	} `yaml:"caches"`
	CacheKeys      map[string]string `yaml:"cache_keys"`
	Coverage       map[string]string `yaml:"coverage"`
	PipelineStatus string            `yaml:"pipeline_status"`
}

// Run is what one run of a scenario shows.
type Run struct {
	Success   []string            `yaml:"success"`
	Failed    []string            `yaml:"failed"`
	NotRun    []string            `yaml:"not_run"`
	Output    map[string][]string `yaml:"output"`
	NotOutput map[string][]string `yaml:"not_output"`
	ExitOK    *bool               `yaml:"exit_ok"`
}

// Load reads every case directory of the corpus at dir, sorted by name.
func Load(dir string) ([]Case, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Case
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c := Case{Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		data, err := os.ReadFile(filepath.Join(c.Dir, "expect.yaml"))
		if err != nil {
			return nil, err
		}
		var doc struct {
			Scenarios []Scenario `yaml:"scenarios"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s/expect.yaml: %w", e.Name(), err)
		}
		c.Scenarios = doc.Scenarios
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
