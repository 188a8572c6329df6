package executor

import (
	"runtime"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/api"
)

// JobVariables returns the variables a job's scripts get, lowest precedence
// first, in GitLab Runner's order: CI_JOB_IMAGE, the runner's environment
// setting (K=V entries), the runner's predefined CI_* variables, the job's
// variables (which therefore win over the first three), then what the
// runner says of itself (CI_SHARED_ENVIRONMENT or
// CI_DISPOSABLE_ENVIRONMENT, CI_RUNNER_VERSION,
// CI_RUNNER_EXECUTABLE_ARCH), which wins. Predefined values are raw: a
// path is never expanded.
// The build runner gives them to the job's stages (PrepareOptions.Variables);
// an executor that hands them to programs of its own, as the custom
// executor's driver calls do, calls it directly.
func JobVariables(job *api.JobResponse, s Settings, paths Paths, version string) api.Variables {
	predef := func(k, v string) api.Variable {
		return api.Variable{Key: k, Value: v, Public: true, Internal: true, Raw: true}
	}
	var vars api.Variables
	if job.Image.Name != "" {
		vars = append(vars, predef("CI_JOB_IMAGE", job.Image.Name))
	}
	for _, kv := range s.Environment {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		vars = append(vars, api.Variable{Key: k, Value: v, Public: true, Internal: true})
	}
	id := strconv.Itoa(s.ConcurrentID)
	vars = append(vars,
		predef("CI_BUILDS_DIR", paths.BuildsDir),
		predef("CI_PROJECT_DIR", paths.ProjectDir),
		predef("CI_CONCURRENT_ID", id),
		// drover does not count jobs per project; the slot number keeps
		// the value unique among the jobs running on this runner.
		predef("CI_CONCURRENT_PROJECT_ID", id),
		predef("CI_RUNNER_SHORT_TOKEN", s.ShortToken),
		predef("CI_SERVER", "yes"),
		predef("CI_JOB_TIMEOUT", strconv.Itoa(job.TimeoutSeconds())),
	)
	// The coordinator's TLS as the runner knows it, for the helper's
	// artifact transfers (and the job's own tools): file variables, as
	// GitLab Runner gives them; the key only with its certificate.
	if s.ServerTLS.CA != "" {
		vars = append(vars, api.Variable{Key: api.VarTLSCAFile, Value: s.ServerTLS.CA, Public: true, Internal: true, File: true, Raw: true})
	}
	if s.ServerTLS.Cert != "" && s.ServerTLS.Key != "" {
		vars = append(vars,
			api.Variable{Key: api.VarTLSCertFile, Value: s.ServerTLS.Cert, Public: true, Internal: true, File: true, Raw: true},
			api.Variable{Key: api.VarTLSKeyFile, Value: s.ServerTLS.Key, Internal: true, File: true, Raw: true})
	}
	vars = append(vars, job.Variables...)
	// A job in containers made for it alone runs in a disposable
	// environment; on a shell or an instance it shares the host.
	if s.Disposable {
		vars = append(vars, predef("CI_DISPOSABLE_ENVIRONMENT", "true"))
	} else {
		vars = append(vars, predef("CI_SHARED_ENVIRONMENT", "true"))
	}
	if version != "" {
		vars = append(vars, predef("CI_RUNNER_VERSION", version))
	}
	vars = append(vars, predef("CI_RUNNER_EXECUTABLE_ARCH", runtime.GOOS+"/"+runtime.GOARCH))
	return vars
}
