package shell

import (
	"slices"
	"testing"
)

func TestFetchPlan(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	zero := "0000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name, ref, refType, sha string
		refspecs                []string
		wantSpecs               []string
		wantTarget              string
		wantErr                 bool
	}{
		{"branch with sha", "main", "branch", sha, nil, []string{"+refs/heads/main:refs/remotes/origin/main"}, sha, false},
		{"branch, no sha: its tip", "main", "branch", "", nil, []string{"+refs/heads/main:refs/remotes/origin/main"}, "refs/remotes/origin/main", false},
		{"branch, all-zero sha: its tip", "main", "branch", zero, nil, []string{"+refs/heads/main:refs/remotes/origin/main"}, "refs/remotes/origin/main", false},
		{"tag, all-zero sha", "v1", "tag", zero, nil, []string{"+refs/tags/v1:refs/tags/v1"}, "refs/tags/v1", false},
		{"refspecs given", "main", "branch", sha, []string{"+refs/heads/*:refs/remotes/origin/*"}, []string{"+refs/heads/*:refs/remotes/origin/*"}, sha, false},
		{"no ref, no sha", "", "", "", nil, nil, "FETCH_HEAD", false},
		{"option as ref", "-x", "branch", "", nil, nil, "", true},
		{"option as sha", "main", "branch", "-x", nil, nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, target, err := fetchPlan(tc.ref, tc.refType, tc.sha, tc.refspecs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !slices.Equal(specs, tc.wantSpecs) || target != tc.wantTarget {
				t.Fatalf("fetchPlan = %v, %q; want %v, %q", specs, target, tc.wantSpecs, tc.wantTarget)
			}
		})
	}
}
