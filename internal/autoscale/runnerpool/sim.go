package runnerpool

import (
	"fmt"
	"sort"
	"time"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/fleet/sim"
)

// simOptions reads the plugin_config of the sim provider: boot_time,
// boot_spread, delete_time (duration strings), seed and max_size
// (non-negative integers).
func simOptions(m map[string]any) (sim.Options, error) {
	var o sim.Options
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case "boot_time", "boot_spread", "delete_time":
			s, ok := v.(string)
			if !ok {
				return sim.Options{}, fmt.Errorf("sim provider config: %s: want a duration string, got %s", k, config.TypeName(v))
			}
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return sim.Options{}, fmt.Errorf("sim provider config: %s: %q is not a duration >= 0", k, s)
			}
			switch k {
			case "boot_time":
				o.BootTime = d
			case "boot_spread":
				o.BootSpread = d
			default:
				o.DeleteTime = d
			}
		case "seed", "max_size":
			n, ok := v.(int64)
			if !ok || n < 0 {
				return sim.Options{}, fmt.Errorf("sim provider config: %s: want an integer >= 0, got %v", k, v)
			}
			if k == "seed" {
				o.Seed = uint64(n)
			} else {
				o.MaxSize = int(n)
			}
		default:
			return sim.Options{}, fmt.Errorf("sim provider config: %s: unknown key (known: boot_spread, boot_time, delete_time, max_size, seed)", k)
		}
	}
	return o, nil
}
