package docker

import (
	"strings"
	"testing"
)

// FuzzParseConfig feeds plugin_config tables of every value type the TOML
// decoder produces; parsing must never panic and must only accept a
// usable configuration.
func FuzzParseConfig(f *testing.F) {
	f.Add("image", byte(0), "x:1", int64(0), false)
	f.Add("max_size", byte(1), "", int64(-3), false)
	f.Add("build_image", byte(2), "", int64(0), true)
	f.Add("address", byte(0), "container", int64(0), false)
	f.Add("authorized_keys_path", byte(0), "rel/path", int64(0), false)
	f.Add("network", byte(3), "", int64(0), false)
	f.Fuzz(func(t *testing.T, key string, kind byte, s string, n int64, b bool) {
		var v any
		switch kind % 5 {
		case 0:
			v = s
		case 1:
			v = n
		case 2:
			v = b
		case 3:
			v = []any{s, n}
		default:
			v = map[string]any{s: n}
		}
		c, err := parseConfig(map[string]any{key: v})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "docker provider config: ") {
				t.Fatalf("error %q does not say where it comes from", err)
			}
			return
		}
		if c.Image == "" || c.MaxSize < 0 || (c.Address != "published" && c.Address != "container") ||
			!strings.HasPrefix(c.AuthorizedKeysPath, "/") {
			t.Fatalf("parseConfig(%q: %#v) accepted %+v", key, v, c)
		}
	})
}
