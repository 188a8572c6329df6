package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
)

// Save writes c to path in GitLab Runner's format, atomically: the data
// goes to a temporary file in the same directory, which is synced and then
// renamed over path, so readers see either the old or the new file, never
// a partial one. The file has mode 0600 (it holds runner tokens).
//
// A url or token that came from $VAR expansion and was not changed since
// Parse is written in its unexpanded form. Values in Extra and in the
// verbatim sub-tables are written back as they were decoded. Everything
// else of the file is lost: comments, and the keys the user left out, which
// come back with the values Parse filled in. To change a file the user
// wrote, use an [Edit].
func (c *Config) Save(path string) error {
	data, err := c.encode()
	if err != nil {
		return fmt.Errorf("config: encode %s: %w", path, err)
	}
	return writeFileAtomic(path, data, 0o600)
}

// encode renders the top level (scalars, then tables) in one go and then
// appends one "[[runners]]" element per runner; concatenating them is
// valid TOML because array-of-tables headers may repeat.
func (c *Config) encode() ([]byte, error) {
	var top []field
	add := func(k string, v any, keep bool) {
		if keep {
			top = append(top, field{k, v})
		}
	}
	add("concurrent", int64(c.Concurrent), true)
	add("check_interval", int64(c.CheckInterval), c.CheckInterval != 0)
	add("log_level", c.LogLevel, c.LogLevel != "")
	add("log_format", c.LogFormat, c.LogFormat != "")
	add("listen_address", c.ListenAddress, c.ListenAddress != "")
	add("shutdown_timeout", int64(c.ShutdownTimeout), c.ShutdownTimeout != 0)
	add("user", c.User, c.User != "")
	add("labels", c.Labels, len(c.Labels) > 0)
	top = appendExtra(top, c.Extra, "runners")

	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(orderedStruct(top).Interface()); err != nil {
		return nil, err
	}
	for i := range c.Runners {
		block, err := encodeRunner(c.Runners[i].fields())
		if err != nil {
			return nil, fmt.Errorf("runners[%d]: %w", i, err)
		}
		buf.WriteString("\n")
		buf.Write(block)
	}
	return buf.Bytes(), nil
}

// encodeRunner renders one "[[runners]]" element holding fs, in order.
func encodeRunner(fs []field) ([]byte, error) {
	r := orderedStruct(fs)
	list := reflect.MakeSlice(reflect.SliceOf(r.Type()), 1, 1)
	list.Index(0).Set(r)
	doc := orderedStruct([]field{{"runners", list.Interface()}})
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(doc.Interface()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (r *RunnerConfig) fields() []field {
	var fs []field
	add := func(k string, v any, keep bool) {
		if keep {
			fs = append(fs, field{k, v})
		}
	}
	str := func(k, v string) { add(k, v, v != "") }
	num := func(k string, v int) { add(k, int64(v), v != 0) }
	tm := func(k string, v time.Time) { add(k, v, !v.IsZero()) }
	tbl := func(k string, v map[string]any) { add(k, v, v != nil) }

	str("name", r.Name)
	str("url", unexpanded(r.URL, r.rawURL, r.expandedURL))
	add("id", r.ID, r.ID != 0)
	str("token", unexpanded(r.Token, r.rawToken, r.expandedToken))
	tm("token_obtained_at", r.TokenObtainedAt)
	tm("token_expires_at", r.TokenExpiresAt)
	str("tls-ca-file", r.TLSCAFile)
	str("tls-cert-file", r.TLSCertFile)
	str("tls-key-file", r.TLSKeyFile)
	str("executor", r.Executor)
	str("shell", r.Shell)
	num("limit", r.Limit)
	num("request_concurrency", r.RequestConcurrency)
	add("strict_check_interval", true, r.StrictCheckInterval)
	num("output_limit", r.OutputLimit)
	str("builds_dir", r.BuildsDir)
	str("cache_dir", r.CacheDir)
	str("clone_url", r.CloneURL)
	add("environment", r.Environment, len(r.Environment) > 0)
	str("pre_get_sources_script", r.PreGetSourcesScript)
	str("post_get_sources_script", r.PostGetSourcesScript)
	str("pre_build_script", r.PreBuildScript)
	str("post_build_script", r.PostBuildScript)
	add("debug_trace_disabled", true, r.DebugTraceDisabled)
	num("job_status_final_update_retry_limit", r.JobStatusFinalUpdateRetryLimit)
	num("unhealthy_requests_limit", r.UnhealthyRequestsLimit)
	// Always written: 0 is meaningful and differs from "unset" (60m).
	add("unhealthy_interval", r.UnhealthyInterval.String(), true)
	add("feature_flags", r.FeatureFlags, len(r.FeatureFlags) > 0)
	add("labels", r.Labels, len(r.Labels) > 0)
	fs = appendExtra(fs, r.Extra)
	tbl("docker", r.Docker)
	tbl("machine", r.Machine)
	tbl("autoscaler", r.Autoscaler)
	tbl("instance", r.Instance)
	tbl("custom", r.Custom)
	tbl("cache", r.Cache)
	tbl("kubernetes", r.Kubernetes)
	tbl("ssh", r.SSH)
	tbl("qemu", r.Qemu)
	tbl("virtualbox", r.VirtualBox)
	tbl("parallels", r.Parallels)
	tbl("store", r.Store)
	tbl("custom_build_dir", r.CustomBuildDir)
	tbl("artifact", r.Artifact)
	return dedupe(fs)
}

// unexpanded returns the raw (pre-expansion) value while the current value
// is still what Parse expanded it to.
func unexpanded(current, raw, expanded string) string {
	if raw != "" && current == expanded {
		return raw
	}
	return current
}

type field struct {
	key string
	val any
}

// appendExtra adds the verbatim keys in sorted order, skipping the
// reserved ones.
func appendExtra(fs []field, extra map[string]any, reserved ...string) []field {
	for _, k := range SortedKeys(extra) {
		v := extra[k]
		if slices.Contains(reserved, k) || v == nil {
			continue
		}
		fs = append(fs, field{k, v})
	}
	return fs
}

// dedupe keeps the first field of each key, so an Extra entry can never
// produce a duplicate key next to a named field.
func dedupe(fs []field) []field {
	seen := map[string]bool{}
	out := fs[:0]
	for _, f := range fs {
		if !seen[f.key] {
			seen[f.key] = true
			out = append(out, f)
		}
	}
	return out
}

// orderedStruct builds a struct value whose fields are fs, in order, with
// toml tags naming the keys: the TOML encoder keeps struct field order
// (maps would be sorted), which keeps the file close to GitLab Runner's.
// Keys a struct tag cannot express ("", "-", anything with a comma) make
// it fall back to a map, which loses the order but not the data.
func orderedStruct(fs []field) reflect.Value {
	fs = dedupe(fs)
	for _, f := range fs {
		if f.key == "" || f.key == "-" || strings.Contains(f.key, ",") {
			m := make(map[string]any, len(fs))
			for _, f := range fs {
				m[f.key] = f.val
			}
			return reflect.ValueOf(m)
		}
	}
	sf := make([]reflect.StructField, len(fs))
	for i, f := range fs {
		sf[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: reflect.TypeOf(f.val),
			Tag:  reflect.StructTag("toml:" + strconv.Quote(f.key)),
		}
	}
	v := reflect.New(reflect.StructOf(sf)).Elem()
	for i, f := range fs {
		v.Field(i).Set(reflect.ValueOf(f.val))
	}
	return v
}

// writeFileAtomic replaces path with data so that no reader ever sees a
// partial file. Run as root, it gives the new file the owner of the file
// it replaces, else of the directory: sudo drover register into the
// config directory of a service that runs as another user (drover
// install, the packages) leaves files that user can read.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err = chownLike(f, path, dir); err != nil {
			return err
		}
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable; not every platform can sync a
	// directory, so this is best effort.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// chownLike gives f the owner and group of path, or of dir when path does
// not exist; nothing changes when that is root's.
func chownLike(f *os.File, path, dir string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if fi, err = os.Stat(dir); err != nil {
			return err
		}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (st.Uid == 0 && st.Gid == 0) {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}
