package instance

import (
	"fmt"
	"sort"
)

// Config is [runners.instance].
type Config struct {
	// UseCommonBuildDir puts a job's project directory under the manager's
	// concurrent id instead of the instance slot (see the package doc).
	UseCommonBuildDir bool
	// AllowedImages is accepted for compatibility (GitLab Runner uses it
	// for VM isolation); drover does not use it.
	AllowedImages []string
}

// ParseConfig reads the raw [runners.instance] table as internal/config
// keeps it (nil: all defaults). where(key) names a key for an error,
// typically "config.toml:12: runners[0].instance.use_common_build_dir".
func ParseConfig(m map[string]any, where func(key string) string) (Config, error) {
	var c Config
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error is the same on every run
	for _, k := range keys {
		v := m[k]
		switch k {
		case "use_common_build_dir":
			b, ok := v.(bool)
			if !ok {
				return Config{}, fmt.Errorf("%s: want true or false, got %v (%T)", where(k), v, v)
			}
			c.UseCommonBuildDir = b
		case "allowed_images":
			list, ok := v.([]any)
			if !ok {
				return Config{}, fmt.Errorf("%s: want an array of strings, got %T", where(k), v)
			}
			for i, item := range list {
				s, ok := item.(string)
				if !ok {
					return Config{}, fmt.Errorf("%s: item %d: want a string, got %T", where(k), i, item)
				}
				c.AllowedImages = append(c.AllowedImages, s)
			}
		default:
			return Config{}, fmt.Errorf("%s: unknown key (known: allowed_images, use_common_build_dir)", where(k))
		}
	}
	return c, nil
}
