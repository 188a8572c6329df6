package jobrun

import (
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// afterScriptTimeout reads RUNNER_AFTER_SCRIPT_TIMEOUT: a Go duration
// ("10m") or a number of seconds; default 5 minutes.
func afterScriptTimeout(vars api.Variables) time.Duration {
	const def = 5 * time.Minute
	v := strings.TrimSpace(vars.Get("RUNNER_AFTER_SCRIPT_TIMEOUT"))
	if v == "" {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return def
}
