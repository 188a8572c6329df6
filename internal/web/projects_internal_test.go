package web

import (
	"strings"
	"testing"
)

// FuzzParseVariables: the run form's KEY=VALUE lines, as a browser
// sends them. Whatever the text, the variables read have names of
// letters, digits and _, one a non-blank line at most, and each value is
// what followed the first = on its line.
func FuzzParseVariables(f *testing.F) {
	for _, seed := range []string{
		"", "A=1", "A=1\nB=two words\n", "A=1\r\nB=2", "  \n\nA==x=\n", "A", "=x", "1A=x", "A B=x",
		"A=<script>alert(1)</script>", "A=\x00", "_=", "K=é\u2028",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		vars, err := parseVariables(text)
		if err != nil {
			if vars != nil {
				t.Errorf("parseVariables(%q) = %v and %v: variables with an error", text, vars, err)
			}
			return
		}
		lines := 0
		for _, l := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
			if strings.TrimSpace(l) != "" {
				lines++
			}
		}
		if len(vars) != lines {
			t.Errorf("parseVariables(%q): %d variables of %d lines", text, len(vars), lines)
		}
		for _, v := range vars {
			if !varKeyRE.MatchString(v[0]) {
				t.Errorf("parseVariables(%q): name %q", text, v[0])
			}
			if strings.Contains(v[1], "\n") {
				t.Errorf("parseVariables(%q): value %q spans lines", text, v[1])
			}
		}
	})
}
