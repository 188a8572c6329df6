package cache

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/drover-ci/drover/internal/config"
)

// ParseRunner reads the [runners.cache] of r: nil when the runner has
// none or no Type (its caches stay in the local cache directory). Unknown
// keys and invalid settings are errors naming config.toml's file and
// line.
func ParseRunner(file string, r *config.RunnerConfig) (*Config, error) {
	if len(r.Cache) == 0 {
		return nil, nil
	}
	fail := func(key, format string, args ...any) error {
		path, line := r.KeyLine(key)
		return &config.Error{File: file, Line: line, Key: path, Msg: fmt.Sprintf(format, args...)}
	}
	// The raw table back to TOML and into the typed Config: the key names
	// are GitLab's, as the struct tags spell them.
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(r.Cache); err != nil {
		return nil, fail("cache", "%v", err)
	}
	var c Config
	md, err := toml.Decode(buf.String(), &c)
	if err != nil {
		return nil, fail("cache", "%v", err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return nil, fail("cache."+keys[0], "unknown key")
	}
	if err := c.Validate(); err != nil {
		return nil, fail("cache", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if c.Type == "" {
		return nil, nil
	}
	return &c, nil
}
