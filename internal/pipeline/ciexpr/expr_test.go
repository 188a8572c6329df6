package ciexpr

import (
	"errors"
	"testing"
)

func TestEval(t *testing.T) {
	vars := map[string]string{
		"CI_COMMIT_BRANCH":   "main",
		"CI_COMMIT_TAG":      "",
		"CI_PIPELINE_SOURCE": "push",
		"EMPTY":              "",
		"PATTERN":            "/^ma/",
		"BADPATTERN":         "ma",
		"MSG":                "Fix THE bug\nsecond line",
		"SAME":               "main",
	}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{`$CI_COMMIT_BRANCH == "main"`, true},
		{`$CI_COMMIT_BRANCH == 'main'`, true},
		{`$CI_COMMIT_BRANCH != "main"`, false},
		{`$CI_COMMIT_BRANCH`, true},
		{`$EMPTY`, false},
		{`$UNDEFINED`, false},
		{`$UNDEFINED == null`, true},
		{`$EMPTY == null`, false},
		{`$EMPTY == ""`, true},
		{`$UNDEFINED == ""`, false},
		{`$UNDEFINED != null`, false},
		{`$CI_COMMIT_BRANCH == $SAME`, true},
		{`$CI_COMMIT_BRANCH =~ /^ma/`, true},
		{`$CI_COMMIT_BRANCH =~ /^MA/`, false},
		{`$CI_COMMIT_BRANCH =~ /^MA/i`, true},
		{`$CI_COMMIT_BRANCH !~ /^dev/`, true},
		{`$UNDEFINED =~ /.*/`, false},
		{`$UNDEFINED !~ /x/`, true},
		{`$CI_COMMIT_BRANCH =~ $PATTERN`, true},
		{`$CI_COMMIT_BRANCH =~ $BADPATTERN`, false},
		{`$MSG =~ /bug.second/`, false},
		{`$MSG =~ /bug.second/m`, true},
		{`$MSG =~ /\/?Fix/`, true},
		{`$CI_COMMIT_BRANCH == "main" && $CI_PIPELINE_SOURCE == "push"`, true},
		{`$CI_COMMIT_BRANCH == "dev" || $CI_PIPELINE_SOURCE == "push"`, true},
		// && binds tighter than ||.
		{`$CI_COMMIT_BRANCH == "main" || $CI_COMMIT_BRANCH == "x" && $EMPTY`, true},
		{`($CI_COMMIT_BRANCH == "main" || $CI_COMMIT_BRANCH == "x") && $EMPTY`, false},
		{`$CI_COMMIT_TAG || $CI_COMMIT_BRANCH == "main"`, true},
		{`((($CI_COMMIT_BRANCH)))`, true},
		{`null`, false},
		{`"text"`, true},
		{`""`, false},
	} {
		e, err := Parse(tc.expr)
		if err != nil {
			t.Errorf("Parse(%q) = %v", tc.expr, err)
			continue
		}
		if got := e.Eval(lookup); got != tc.want {
			t.Errorf("Parse(%q).Eval = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		``,
		`${GITLAB_CI} == "true"`,
		`$A ==`,
		`$A == "x`,
		`$A =~ /x`,
		`$A =~ "x"`,
		`($A`,
		`$A)`,
		`$A $B`,
		`!$A`,
		`$A == "x" &&`,
		`$A =~ /(/`,
		`$A =~ /x/q`,
		`$A = "x"`,
	} {
		if _, err := Parse(src); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want an error wrapping ErrSyntax", src, err)
		}
	}
}

func TestVariables(t *testing.T) {
	e, err := Parse(`$A == "x" || ($B =~ /y/ && $A)`)
	if err != nil {
		t.Fatal(err)
	}
	got := e.Variables()
	if len(got) != 2 || got[0] != "A" || got[1] != "B" {
		t.Errorf("Variables() = %v, want [A B]", got)
	}
}

func TestDeepNesting(t *testing.T) {
	src := ""
	for range 10000 {
		src += "("
	}
	if _, err := Parse(src + "$A"); !errors.Is(err, ErrSyntax) {
		t.Errorf("Parse(10000 parentheses) = %v, want ErrSyntax", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`$A == "x"`, `$A =~ /^x/i && ($B || $C != null)`, `'a' != $B`, `(`, `$`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := Parse(src)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) = %v, not wrapping ErrSyntax", src, err)
			}
			return
		}
		e.Eval(func(n string) (string, bool) { return n, len(n)%2 == 0 })
		// A parsed expression parses again from its source.
		if _, err := Parse(e.String()); err != nil {
			t.Fatalf("Parse(%q) succeeded, again: %v", src, err)
		}
	})
}
