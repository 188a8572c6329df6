package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics, that every failure is one
// *Error or several joined, each with a usable position and in line
// order, that warnings are in line order, that every success is a valid
// config, and that what Save would write parses back to the same config.
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
		"concurrent = 0\n[[runners]]\nurl = 1\nexecutor = \"virtualbox\"\n[[runners]]\nexecutor = \"nope\"\nshell = \"fish\"\n",
		"[session_server]\nsession_timeout = 1800\n" + minimalRunner + "  clone_url = \"x\"\n  environment = [\"FF_A=1\"]\n  [runners.feature_flags]\n    FF_B = true\n  [runners.cache.s3]\n    BucketName = \"b\"\n  [runners.machine]\n    IdleCount = 1\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, warnings, err := Parse("config.toml", data)
		for i, w := range warnings {
			if w.Line < 0 || w.File != "config.toml" {
				t.Errorf("warning %+v: bad position", w)
			}
			if i > 0 && w.Line < warnings[i-1].Line {
				t.Errorf("warnings %v: not sorted by line", warnings)
			}
		}
		if err != nil {
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			line := 0
			for _, e := range errs {
				cerr, ok := e.(*Error)
				if !ok {
					t.Fatalf("Parse() error = %T %v, want *Error, or *Error values joined", e, e)
				}
				if cerr.Line < line || cerr.File != "config.toml" || cerr.Msg == "" {
					t.Fatalf("Parse() error %+v: bad position, out of order or empty message", cerr)
				}
				line = cerr.Line
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
