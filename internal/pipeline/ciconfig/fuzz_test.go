package ciconfig

import (
	"errors"
	"testing"
	"testing/fstest"
)

// FuzzCompile feeds the front end (YAML, includes, extends, !reference,
// rules) arbitrary files: it must return a pipeline or an error that says
// where, never panic or run away.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"j: {script: [x]}",
		"include: b.yml\n.t: &t {script: [x]}\nj: {<<: *t, extends: .u}\n",
		"j:\n  script: !reference [.b, script]\n  rules: [{if: '$A == \"1\"', when: manual}]\n",
		"stages: [a]\nj: {stage: a, script: x, parallel: {matrix: [{A: [1, 2]}]}, needs: []}\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nj: {script: *b}\n",
	} {
		f.Add(s, ".u: {extends: .t}\n.b: {script: [y]}\n")
	}
	f.Fuzz(func(t *testing.T, main, other string) {
		in := Input{
			FS: fstest.MapFS{
				".gitlab-ci.yml": &fstest.MapFile{Data: []byte(main)},
				"b.yml":          &fstest.MapFile{Data: []byte(other)},
			},
			Predefined: map[string]string{"CI_COMMIT_BRANCH": "main", "CI_COMMIT_REF_NAME": "main"},
			Limits:     Limits{Nodes: 20000},
		}
		p, err := Compile(in)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) && !errors.Is(err, ErrFiltered) && !errors.Is(err, ErrNoJobs) {
				t.Fatalf("Compile = %v (%T), want Errors, ErrFiltered or ErrNoJobs", err, err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("Compile: an error with no message at %v", e.Pos)
				}
			}
			return
		}
		if len(p.Jobs) == 0 {
			t.Fatal("Compile returned a pipeline with no jobs and no error")
		}
		for _, j := range p.Jobs {
			if len(j.Script) == 0 {
				t.Fatalf("job %q has no script", j.Name)
			}
		}
	})
}
