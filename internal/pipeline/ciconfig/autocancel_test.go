package ciconfig

import (
	"strings"
	"testing"
)

func TestAutoCancel(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
		want      AutoCancel
	}{
		{"default", "j: {script: [x]}", AutoCancel{"conservative", "none"}},
		{"workflow", "workflow: {auto_cancel: {on_new_commit: interruptible, on_job_failure: all}}\nj: {script: [x]}", AutoCancel{"interruptible", "all"}},
		{"rule wins key by key", `
workflow:
  auto_cancel: {on_new_commit: interruptible, on_job_failure: all}
  rules:
    - if: $CI_COMMIT_BRANCH == "other"
      auto_cancel: {on_new_commit: conservative}
    - if: $CI_COMMIT_BRANCH == "main"
      auto_cancel: {on_new_commit: none}
j: {script: [x]}`, AutoCancel{"none", "all"}},
		{"rule without auto_cancel", `
workflow:
  auto_cancel: {on_new_commit: none}
  rules: [{when: always}]
j: {script: [x]}`, AutoCancel{"none", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compileString(t, tc.yml, nil)
			if err != nil {
				t.Fatalf("Compile = %v", err)
			}
			if p.AutoCancel != tc.want {
				t.Errorf("AutoCancel = %+v, want %+v", p.AutoCancel, tc.want)
			}
		})
	}
}

func TestAutoCancelErrors(t *testing.T) {
	for _, tc := range []struct{ yml, want string }{
		{"workflow: {auto_cancel: {on_new_commit: always}}\nj: {script: [x]}", ".gitlab-ci.yml:1: workflow:auto_cancel:on_new_commit must be one of conservative, interruptible, none"},
		{"workflow: {auto_cancel: {on_job_failure: some}}\nj: {script: [x]}", "workflow:auto_cancel:on_job_failure must be one of all, none"},
		{"workflow: {auto_cancel: {on_push: none}}\nj: {script: [x]}", `unknown key "on_push"`},
		{"workflow: {auto_cancel: none}\nj: {script: [x]}", "workflow:auto_cancel must be a hash"},
		{"workflow: {rules: [{auto_cancel: {on_new_commit: x}}]}\nj: {script: [x]}", "workflow:rules:rule:auto_cancel:on_new_commit must be one of"},
	} {
		_, err := compileString(t, tc.yml, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) = %v, want an error with %q", tc.yml, err, tc.want)
		}
	}
}
