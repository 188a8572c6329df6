package custom

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ConfigOutput is what config_exec prints on stdout: one JSON object.
// Every key is optional.
type ConfigOutput struct {
	// BuildsDir and CacheDir replace the runner's builds_dir and
	// cache_dir: absolute paths where the stage scripts run.
	BuildsDir string `json:"builds_dir,omitempty"`
	CacheDir  string `json:"cache_dir,omitempty"`
	// BuildsDirIsShared says whether concurrent jobs share BuildsDir: the
	// project directory then has <short token>/<concurrent id>/ in it.
	BuildsDirIsShared *bool  `json:"builds_dir_is_shared,omitempty"`
	Hostname          string `json:"hostname,omitempty"`
	Driver            *struct {
		Name    string `json:"name,omitempty"`
		Version string `json:"version,omitempty"`
	} `json:"driver,omitempty"`
	// JobEnv is added to the environment of the later driver calls (not
	// to the job's).
	JobEnv map[string]string `json:"job_env,omitempty"`
	// Shell is the stage scripts' shell: bash or sh.
	Shell string `json:"shell,omitempty"`
	// Resumable (a drover extension) says the driver keeps a stage
	// running when the manager dies and implements resume_exec.
	Resumable bool `json:"resumable,omitempty"`
}

// maxConfigOutput bounds what is read of config_exec's stdout.
const maxConfigOutput = 1 << 20

// ParseConfigOutput reads config_exec's stdout: exactly one JSON object
// with only the keys of ConfigOutput, and nothing after it but white
// space. Unlike GitLab Runner, which ignores unknown keys, drover refuses
// them: a misspelt key would otherwise silently change where jobs run.
func ParseConfigOutput(b []byte) (ConfigOutput, error) {
	var out ConfigOutput
	if len(bytes.TrimSpace(b)) == 0 {
		return out, errors.New("no output: want one JSON object")
	}
	if len(b) > maxConfigOutput {
		return out, fmt.Errorf("%d bytes of output: at most %d", len(b), maxConfigOutput)
	}
	if b := bytes.TrimLeft(b, " \t\r\n"); b[0] != '{' {
		return out, errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return ConfigOutput{}, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ConfigOutput{}, errors.New("invalid JSON: more after the object")
	}
	if err := out.validate(); err != nil {
		return ConfigOutput{}, err
	}
	if len(out.JobEnv) == 0 {
		out.JobEnv = nil // "job_env": {} adds nothing, as no job_env
	}
	return out, nil
}

func (o *ConfigOutput) validate() error {
	for key, dir := range map[string]string{"builds_dir": o.BuildsDir, "cache_dir": o.CacheDir} {
		if dir != "" && !path.IsAbs(dir) {
			return fmt.Errorf("%s %q is not an absolute path", key, dir)
		}
		if strings.ContainsRune(dir, 0) {
			return fmt.Errorf("%s holds a NUL byte", key)
		}
	}
	switch o.Shell {
	case "", "bash", "sh":
	default:
		return fmt.Errorf("shell %q is not supported: bash or sh", o.Shell)
	}
	for k, v := range o.JobEnv {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("job_env: %q is not a variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("job_env: %s holds a NUL byte", k)
		}
	}
	return nil
}

// firstLines returns at most n lines of b, for the job log.
func firstLines(b []byte, n int) string {
	lines := strings.SplitAfterN(string(b), "\n", n+1)
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	more := len(lines) > n
	if more {
		lines = lines[:n]
	}
	s := strings.Join(lines, "")
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	if more {
		s += "[...]\n"
	}
	return s
}
