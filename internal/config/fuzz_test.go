package config

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, that every failure is an
// *Error with a usable position, that every success is a valid config, and
// that what Save would write parses back to the same config.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"",
		minimalRunner,
		"concurrent = 0\n" + minimalRunner,
		"concurrent = \"x\"\n",
		"[[runners]]\nurl = \"https://x\"\n[[runners]]\nlimit = 1.5\n",
		"listen_address = \"[::1]\"\n" + minimalRunner,
		"runners = [{url = \"https://g/\", token = \"t\", executor = \"shell\", docker = {services = [{name = \"pg\"}]}}]\n",
		minimalRunner + "  [runners.docker]\n    when = 1979-05-27T07:32:00\n    day = 1979-05-27\n    f = nan\n    [[runners.docker.services]]\n      name = \"a\"\n",
		minimalRunner + "  \"we.ird\" = \"\"\"\nmulti\nline\"\"\"\n  'lit' = '''x'''\n",
		"a.b.\"c d\" = 1\n[x.y]\n[[x.z]]\n" + minimalRunner,
		minimalRunner + "  environment = [\n  # c\n  \"A=1\", # d\n  ]\n  unhealthy_interval = 5\n",
		"concurrent = 1\n\n[[runners]\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, warnings, err := Parse("config.toml", data)
		for _, w := range warnings {
			if w.Line < 0 || w.File != "config.toml" {
				t.Errorf("warning %+v: bad position", w)
			}
		}
		if err != nil {
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Parse() error = %T %v, want *Error", err, err)
			}
			if cerr.Line < 0 || cerr.File != "config.toml" || cerr.Msg == "" {
				t.Fatalf("Parse() error %+v: bad position or empty message", cerr)
			}
			if c != nil {
				t.Fatalf("Parse() = %+v with error %v, want nil config", c, err)
			}
			return
		}
		if c.Concurrent < 1 || c.CheckInterval < 1 || c.ShutdownTimeout < 1 {
			t.Fatalf("Parse() = %+v: defaults not applied", c)
		}
		for i, r := range c.Runners {
			if r.URL == "" || r.Token == "" || r.Executor == "" || r.Name == "" ||
				r.Limit < 0 || r.RequestConcurrency < 1 || r.OutputLimit < 1 {
				t.Fatalf("Parse() runners[%d] = %+v: not valid", i, r)
			}
		}

		out, err := c.encode()
		if err != nil {
			t.Fatalf("encode() error = %v", err)
		}
		c2, _, err := Parse("config.toml", out)
		if err != nil {
			t.Fatalf("Parse(encode()) error = %v\ninput:\n%s\nencoded:\n%s", err, data, out)
		}
		if diff := cmp.Diff(c, c2, cmpConfig...); diff != "" {
			t.Fatalf("Parse(encode()) mismatch (-want +got):\n%s\ninput:\n%s\nencoded:\n%s", diff, data, out)
		}
	})
}
