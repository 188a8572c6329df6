package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// hostConfigRunner is a [[runners]] entry without its docker table.
const hostConfigRunner = `concurrent = 1
[[runners]]
  name = "r"
  url = "https://gitlab.example.com"
  token = "glrt-abcdefghijklmnop"
  executor = "docker"
`

// parseDockerTable reads the [runners.docker] table of a config.toml made
// of hostConfigRunner and body, through the config package as drover
// reads it; warnings and errors fail the test.
func parseDockerTable(t *testing.T, body string) *Config {
	t.Helper()
	rc, _, err := config.Parse("config.toml", []byte(hostConfigRunner+body))
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, body)
	}
	c, warnings, err := ParseConfig("config.toml", &rc.Runners[0])
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ParseConfig: warnings %v, error %v\n%s", warnings, err, body)
	}
	return c
}

// TestHostConfig: what each key of [runners.docker] becomes in the build
// container's host configuration, as startBuild asks for it (privileged
// and tmpfs from the runner), and nothing else.
func TestHostConfig(t *testing.T) {
	binds := []string{"job-vol:/drover", "builds-vol:/builds", "cache-vol:/cache", "/srv/data:/data:ro"}
	yes := true
	cases := []struct {
		name string
		body string
		want *container.HostConfig
	}{
		{"no docker table", "", &container.HostConfig{Binds: binds, NetworkMode: "n", LogConfig: jsonFile}},
		{"empty docker table", "[runners.docker]\n", &container.HostConfig{Binds: binds, NetworkMode: "n", LogConfig: jsonFile}},
		{"every mapped key", `[runners.docker]
  privileged = true
  dns = ["1.1.1.1", "2606:4700:4700::1111"]
  dns_search = ["example.com", "corp.example"]
  extra_hosts = ["db:10.0.0.5", "gw:host-gateway"]
  cap_add = ["NET_ADMIN", "SYS_PTRACE"]
  cap_drop = ["MKNOD"]
  security_opt = ["no-new-privileges", "seccomp=unconfined"]
  shm_size = 268435456
  memory = "512m"
  memory_swap = "1g"
  cpus = "1.5"
  cpuset_cpus = "0-1,3"
  oom_kill_disable = true
  devices = ["/dev/fuse", "/dev/a:/dev/b", "/dev/a:/dev/b:r"]
  [runners.docker.sysctls]
    "net.ipv4.ip_forward" = "1"
    "net.core.somaxconn" = "1024"
  [runners.docker.tmpfs]
    "/scratch" = "rw,size=64m"
    "/empty" = ""
`, &container.HostConfig{
			Binds:       binds,
			NetworkMode: "n",
			LogConfig:   jsonFile,
			Privileged:  true,
			DNS:         []string{"1.1.1.1", "2606:4700:4700::1111"},
			DNSSearch:   []string{"example.com", "corp.example"},
			ExtraHosts:  []string{"db:10.0.0.5", "gw:host-gateway"},
			CapAdd:      []string{"NET_ADMIN", "SYS_PTRACE"},
			CapDrop:     []string{"MKNOD"},
			SecurityOpt: []string{"no-new-privileges", "seccomp=unconfined"},
			Sysctls:     map[string]string{"net.ipv4.ip_forward": "1", "net.core.somaxconn": "1024"},
			ShmSize:     256 << 20,
			Tmpfs:       map[string]string{"/scratch": "rw,size=64m", "/empty": ""},
			Resources: container.Resources{
				Memory:         512 << 20,
				MemorySwap:     1 << 30,
				NanoCPUs:       1_500_000_000,
				CpusetCpus:     "0-1,3",
				OomKillDisable: &yes,
				Devices: []container.DeviceMapping{
					{PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rwm"},
					{PathOnHost: "/dev/a", PathInContainer: "/dev/b", CgroupPermissions: "rwm"},
					{PathOnHost: "/dev/a", PathInContainer: "/dev/b", CgroupPermissions: "r"},
				},
			},
		}},
		{"integers, unlimited swap, whole cpus", `[runners.docker]
  privileged = false
  oom_kill_disable = false
  memory = 1073741824
  memory_swap = -1
  cpus = 2
  shm_size = 0
`, &container.HostConfig{
			Binds:       binds,
			NetworkMode: "n",
			LogConfig:   jsonFile,
			Resources:   container.Resources{Memory: 1 << 30, MemorySwap: -1, NanoCPUs: 2_000_000_000},
		}},
		{"fractional cpus and memory units", `[runners.docker]
  memory = "1.5g"
  cpus = "0.25"
  cpuset_cpus = "3"
`, &container.HostConfig{
			Binds:       binds,
			NetworkMode: "n",
			LogConfig:   jsonFile,
			Resources:   container.Resources{Memory: 1536 << 20, NanoCPUs: 250_000_000, CpusetCpus: "3"},
		}},
		{"every container key", `[runners.docker]
  runtime = "runc"
  userns_mode = "host"
  ipcmode = "shareable"
  pid_mode = "host"
  group_add = ["4321"]
  links = ["db:database"]
  volumes_from = ["data:ro"]
  volume_driver = "local"
  oom_score_adjust = -100
  cpu_shares = 512
  memory_reservation = "64m"
  cpuset_mems = "0"
  cgroup_parent = "/ci"
  device_cgroup_rules = ["c 42:* rmw"]
  gpus = "all"
  hostname = "not-a-host-config-key"
  mac_address = "92:d0:c6:0a:29:33"
  service_cpu_shares = 2
  services_security_opt = ["no-new-privileges"]
  [runners.docker.ulimit]
    nofile = "1024:2048"
  [runners.docker.log_options]
    env = "CI_JOB_ID"
`, &container.HostConfig{
			Binds:        binds,
			NetworkMode:  "n",
			LogConfig:    container.LogConfig{Type: "json-file", Config: map[string]string{"env": "CI_JOB_ID"}},
			Runtime:      "runc",
			UsernsMode:   "host",
			IpcMode:      "shareable",
			PidMode:      "host",
			GroupAdd:     []string{"4321"},
			Links:        []string{"db:database"},
			VolumesFrom:  []string{"data:ro"},
			VolumeDriver: "local",
			OomScoreAdj:  -100,
			Resources: container.Resources{
				CPUShares:         512,
				MemoryReservation: 64 << 20,
				CpusetMems:        "0",
				CgroupParent:      "/ci",
				DeviceCgroupRules: []string{"c 42:* rmw"},
				DeviceRequests:    []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}, Options: map[string]string{}}},
				Ulimits:           []*container.Ulimit{{Name: "nofile", Soft: 1024, Hard: 2048}},
			},
		}},
		{"network_mode is the executor's network name", `[runners.docker]
  network_mode = "host"
  volumes = ["/x:/y"]
  user = "1000"
  cache_dir = "/var/cache/drover"
  container_labels = { "team" = "ci" }
`, &container.HostConfig{Binds: binds, NetworkMode: "n", LogConfig: jsonFile}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseDockerTable(t, tc.body)
			e := &Executor{cfg: cfg, netName: "n"}
			got := e.hostConfig(binds, cfg.Privileged, cfg.Tmpfs)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hostConfig() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// jsonFile is the log configuration of every job container without
// log_options.
var jsonFile = container.LogConfig{Type: "json-file"}

// TestHelperHostConfig: the helper container gets the build container's
// settings without its resource limits, pid_mode and group_add.
func TestHelperHostConfig(t *testing.T) {
	cfg := parseDockerTable(t, `[runners.docker]
  privileged = true
  runtime = "runc"
  userns_mode = "host"
  pid_mode = "host"
  ipcmode = "host"
  group_add = ["4321"]
  oom_score_adjust = 10
  volumes_from = ["data"]
  memory = "64m"
  cpu_shares = 512
  gpus = "all"
  cap_add = ["NET_ADMIN"]
  devices = ["/dev/fuse"]
  [runners.docker.ulimit]
    nofile = "10"
`)
	e := &Executor{cfg: cfg, netName: "n"}
	want := &container.HostConfig{
		Binds: []string{"a:/a"}, NetworkMode: "n", LogConfig: jsonFile, Runtime: "runc", UsernsMode: "host",
		IpcMode: "host", OomScoreAdj: 10, VolumesFrom: []string{"data"}, CapAdd: []string{"NET_ADMIN"},
	}
	if diff := cmp.Diff(want, e.helperHostConfig([]string{"a:/a"})); diff != "" {
		t.Errorf("helperHostConfig() mismatch (-want +got):\n%s", diff)
	}
}

// TestServiceHostConfig: what services get, as GitLab Runner gives it:
// their own limits and security options, never the build container's.
func TestServiceHostConfig(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		image string
		want  *container.HostConfig
	}{
		{"defaults", "", "postgres:16", &container.HostConfig{NetworkMode: "n", LogConfig: jsonFile}},
		{"build container's settings are not the services'", `[runners.docker]
  memory = "1g"
  cpus = "2"
  cpu_shares = 512
  cap_add = ["NET_ADMIN"]
  security_opt = ["seccomp=unconfined"]
  devices = ["/dev/fuse"]
  gpus = "all"
  pid_mode = "host"
  group_add = ["4321"]
  oom_score_adjust = 5
  [runners.docker.sysctls]
    "net.core.somaxconn" = "1024"
  [runners.docker.ulimit]
    nofile = "10"
`, "postgres:16", &container.HostConfig{NetworkMode: "n", LogConfig: jsonFile}},
		{"every service key, devices by pattern", `[runners.docker]
  runtime = "runc"
  userns_mode = "host"
  dns = ["1.1.1.1"]
  dns_search = ["example.com"]
  extra_hosts = ["gw:10.0.0.1"]
  shm_size = 1048576
  service_memory = "256m"
  service_memory_swap = "512m"
  service_memory_reservation = "128m"
  service_cpus = "0.5"
  service_cpu_shares = 256
  service_cpuset_cpus = "0"
  service_cgroup_parent = "/svc"
  service_gpus = "1"
  services_security_opt = ["no-new-privileges"]
  [runners.docker.services_tmpfs]
    "/data" = "size=1m"
  [runners.docker.log_options]
    labels = "team"
  [runners.docker.services_devices]
    "postgres:*" = ["/dev/fuse"]
    "**/postgres*" = ["/dev/a:/dev/b:r"]
    "redis:*" = ["/dev/kvm"]
`, "postgres:16", &container.HostConfig{
			NetworkMode: "n", Runtime: "runc", UsernsMode: "host",
			DNS: []string{"1.1.1.1"}, DNSSearch: []string{"example.com"}, ExtraHosts: []string{"gw:10.0.0.1"},
			ShmSize: 1 << 20, Tmpfs: map[string]string{"/data": "size=1m"},
			SecurityOpt: []string{"no-new-privileges"},
			LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"labels": "team"}},
			Resources: container.Resources{
				Memory: 256 << 20, MemorySwap: 512 << 20, MemoryReservation: 128 << 20, NanoCPUs: 5e8,
				CPUShares: 256, CpusetCpus: "0", CgroupParent: "/svc",
				DeviceRequests: []container.DeviceRequest{{Count: 1, Capabilities: [][]string{{"gpu"}}, Options: map[string]string{}}},
				Devices: []container.DeviceMapping{
					{PathOnHost: "/dev/a", PathInContainer: "/dev/b", CgroupPermissions: "r"},
					{PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rwm"},
				},
			},
		}},
		{"devices of no matching pattern", `[runners.docker]
  [runners.docker.services_devices]
    "redis:*" = ["/dev/kvm"]
`, "postgres:16", &container.HostConfig{NetworkMode: "n", LogConfig: jsonFile}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &Executor{cfg: parseDockerTable(t, tc.body), netName: "n"}
			if diff := cmp.Diff(tc.want, e.serviceHostConfig(tc.image, false)); diff != "" {
				t.Errorf("serviceHostConfig(%q) mismatch (-want +got):\n%s", tc.image, diff)
			}
		})
	}
}

// TestHostConfigArguments: privileged and tmpfs are the caller's (the
// helper container is never privileged, services have their own tmpfs),
// whatever the runner says.
func TestHostConfigArguments(t *testing.T) {
	cfg := parseDockerTable(t, `[runners.docker]
  privileged = true
  memory = "64m"
  [runners.docker.tmpfs]
    "/build-tmp" = ""
`)
	e := &Executor{cfg: cfg, netName: "job-net"}
	for _, tc := range []struct {
		privileged bool
		tmpfs      map[string]string
	}{
		{false, nil},
		{true, map[string]string{"/svc": "size=1m"}},
	} {
		hc := e.hostConfig(nil, tc.privileged, tc.tmpfs)
		if hc.Privileged != tc.privileged {
			t.Errorf("hostConfig(privileged %v).Privileged = %v", tc.privileged, hc.Privileged)
		}
		if !cmp.Equal(hc.Tmpfs, tc.tmpfs) {
			t.Errorf("hostConfig(tmpfs %v).Tmpfs = %v", tc.tmpfs, hc.Tmpfs)
		}
		if hc.NetworkMode != "job-net" || hc.Memory != 64<<20 || hc.Binds != nil {
			t.Errorf("hostConfig() = network %q, memory %d, binds %v", hc.NetworkMode, hc.Memory, hc.Binds)
		}
	}
}

func TestParseDevice(t *testing.T) {
	for in, want := range map[string]container.DeviceMapping{
		"/dev/fuse":            {PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rwm"},
		"/dev/a:/dev/b":        {PathOnHost: "/dev/a", PathInContainer: "/dev/b", CgroupPermissions: "rwm"},
		"/dev/a:/dev/b:r":      {PathOnHost: "/dev/a", PathInContainer: "/dev/b", CgroupPermissions: "r"},
		"/dev/kvm:/dev/kvm:rw": {PathOnHost: "/dev/kvm", PathInContainer: "/dev/kvm", CgroupPermissions: "rw"},
		"/dev/a::":             {PathOnHost: "/dev/a", PathInContainer: "/dev/a", CgroupPermissions: "rwm"},
		"/dev/a::m":            {PathOnHost: "/dev/a", PathInContainer: "/dev/a", CgroupPermissions: "m"},
	} {
		if got := parseDevice(in); got != want {
			t.Errorf("parseDevice(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestLabels(t *testing.T) {
	s := executor.Settings{ShortToken: "abcdefghi", SystemID: "s_0123456789ab", RunnerName: "ignored"}
	cases := []struct {
		name  string
		job   int64
		role  string
		extra map[string]string
		want  map[string]string
	}{
		{"build with extra labels", 42, roleBuild, map[string]string{
			"com.example.team":  "ci",
			"io.drover.job":     "999", // cannot pass for another job
			"io.drover.managed": "0",
			"io.drover.other":   "x",
			"io.droverish":      "kept", // not drover's prefix
			"":                  "empty name",
		}, map[string]string{
			LabelManaged:       "1",
			LabelRunner:        "abcdefghi",
			LabelSystemID:      "s_0123456789ab",
			LabelRole:          "build",
			LabelJob:           "42",
			"com.example.team": "ci",
			"io.droverish":     "kept",
			"":                 "empty name",
		}},
		{"helper, no extra", 7, roleHelper, nil, map[string]string{
			LabelManaged: "1", LabelRunner: "abcdefghi", LabelSystemID: "s_0123456789ab", LabelRole: "helper", LabelJob: "7",
		}},
		{"cache volume: no job", 0, roleCache, map[string]string{"a": "b"}, map[string]string{
			LabelManaged: "1", LabelRunner: "abcdefghi", LabelSystemID: "s_0123456789ab", LabelRole: "cache-volume", "a": "b",
		}},
		{"large job id", 1 << 40, roleNetwork, nil, map[string]string{
			LabelManaged: "1", LabelRunner: "abcdefghi", LabelSystemID: "s_0123456789ab", LabelRole: "network", LabelJob: "1099511627776",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before map[string]string
			if tc.extra != nil {
				before = make(map[string]string, len(tc.extra))
				for k, v := range tc.extra {
					before[k] = v
				}
			}
			got := labels(s, tc.job, tc.role, tc.extra)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("labels() mismatch (-want +got):\n%s", diff)
			}
			if !cmp.Equal(before, tc.extra) {
				t.Errorf("labels() changed its extra labels: %v", tc.extra)
			}
		})
	}
	// The prefix dropped is the one container_labels may not use.
	if DroverLabelPrefix != "io.drover." {
		t.Errorf("DroverLabelPrefix = %q; labels() drops %q", DroverLabelPrefix, "io.drover.")
	}
}

func TestJobEnv(t *testing.T) {
	job := &api.JobResponse{Variables: api.Variables{
		{Key: "CI", Value: "true", Public: true},
		{Key: "CONF_FILE", Value: "file content\nline 2", File: true},
		{Key: "SECRET", Value: "s3cr3t", Masked: true},
		{Key: "EQ", Value: "a=b=c"},
		{Key: "EMPTY", Value: ""},
		{Key: "MULTI", Value: "line 1\nline 2"},
		{Key: "CI", Value: "overridden"},
		{Key: "KEY_FILE", Value: "-----BEGIN KEY-----", File: true},
	}}
	want := []string{"CI=true", "SECRET=s3cr3t", "EQ=a=b=c", "EMPTY=", "MULTI=line 1\nline 2", "CI=overridden"}
	if diff := cmp.Diff(want, jobEnv(job)); diff != "" {
		t.Errorf("jobEnv() mismatch (-want +got):\n%s", diff)
	}
	if env := jobEnv(&api.JobResponse{}); len(env) != 0 {
		t.Errorf("jobEnv(no variables) = %q", env)
	}
	if env := jobEnv(&api.JobResponse{Variables: api.Variables{{Key: "F", Value: "x", File: true}}}); len(env) != 0 {
		t.Errorf("jobEnv(only a file variable) = %q", env)
	}
}

func TestConfigServices(t *testing.T) {
	cfg := parseDockerTable(t, `[runners.docker]
  [[runners.docker.services]]
    name = "postgres:16"
    alias = "db, pg"
    command = ["postgres", "-c", "fsync=off"]
    entrypoint = ["docker-entrypoint.sh"]
    environment = ["POSTGRES_PASSWORD=x", "EMPTY=", "EQ=a=b"]
  [[runners.docker.services]]
    name = "redis"
`)
	want := []api.Image{
		{
			Name: "postgres:16", Alias: "db, pg",
			Command:    []string{"postgres", "-c", "fsync=off"},
			Entrypoint: []string{"docker-entrypoint.sh"},
			Variables:  api.Variables{{Key: "POSTGRES_PASSWORD", Value: "x"}, {Key: "EMPTY", Value: ""}, {Key: "EQ", Value: "a=b"}},
		},
		{Name: "redis"},
	}
	if diff := cmp.Diff(want, configServices(cfg)); diff != "" {
		t.Errorf("configServices() mismatch (-want +got):\n%s", diff)
	}
	if got := configServices(parseDockerTable(t, "")); got == nil || len(got) != 0 {
		t.Errorf("configServices(none) = %#v, want an empty list", got)
	}
}

// frame is one frame of docker's multiplexed stream.
func frame(stream byte, payload string) string {
	var h [8]byte
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return string(h[:]) + payload
}

func TestDemux(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 5000) // 80000 bytes: more than demux's buffer
	cases := []struct {
		name           string
		in             string
		stdout, stderr string
		truncated      bool
	}{
		{"empty", "", "", "", false},
		{"stdout and stderr interleaved",
			frame(1, "hello ") + frame(2, "oops\n") + frame(1, "world\n") + frame(2, "again"),
			"hello world\n", "oops\nagain", false},
		{"stdin stream and empty frames", frame(0, "in") + frame(1, "") + frame(2, "") + frame(1, "out"), "inout", "", false},
		{"binary payload", frame(1, "\x00\x01\x02\x01\x00\x00\x00\x05"), "\x00\x01\x02\x01\x00\x00\x00\x05", "", false},
		{"frame larger than the buffer", frame(2, big) + frame(1, "tail"), "tail", big, false},
		{"truncated payload", frame(1, "whole") + frame(2, "0123456789")[:8+4], "whole", "0123", true},
		{"header only", frame(1, "whole") + frame(1, "0123456789")[:8], "whole", "", true},
		{"truncated header", frame(1, "whole") + frame(2, "x")[:5], "whole", "", true},
		{"truncated large frame", frame(1, big)[:8+len(big)-1], big[:len(big)-1], "", true},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":      func(r io.Reader) io.Reader { return r },
		"one byte":   iotest.OneByteReader,
		"half":       iotest.HalfReader,
		"data + EOF": iotest.DataErrReader,
		"split":      func(r io.Reader) io.Reader { return &splitReader{r: r, sizes: []int{3, 5, 1, 7, 2, 11}} },
	}
	for _, tc := range cases {
		for rname, wrap := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				n, err := demux(&stdout, &stderr, wrap(strings.NewReader(tc.in)))
				switch {
				case tc.truncated && err == nil:
					t.Errorf("demux() of a truncated stream = nil error")
				case !tc.truncated && err != nil:
					t.Errorf("demux() = %v", err)
				}
				if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
					t.Errorf("demux(): stdout %d bytes %.40q, stderr %d bytes %.40q; want %d %.40q, %d %.40q",
						stdout.Len(), stdout.String(), stderr.Len(), stderr.String(), len(tc.stdout), tc.stdout, len(tc.stderr), tc.stderr)
				}
				if want := int64(len(tc.stdout) + len(tc.stderr)); n != want {
					t.Errorf("demux() = %d bytes, want %d", n, want)
				}
			})
		}
	}
}

// splitReader returns its data in reads of the given sizes, in turn, so
// that headers and payloads are split at different places.
type splitReader struct {
	r     io.Reader
	sizes []int
	i     int
}

func (s *splitReader) Read(p []byte) (int, error) {
	n := s.sizes[s.i%len(s.sizes)]
	s.i++
	return s.r.Read(p[:min(n, len(p))])
}

func TestDemuxErrors(t *testing.T) {
	in := frame(1, "abc") + frame(2, "def")
	// A failing writer stops demux with its error.
	wantErr := errors.New("disk full")
	var stdout bytes.Buffer
	_, err := demux(&stdout, errWriter{wantErr}, strings.NewReader(in))
	if !errors.Is(err, wantErr) {
		t.Errorf("demux() with a failing stderr = %v, want %v", err, wantErr)
	}
	if stdout.String() != "abc" {
		t.Errorf("stdout = %q before the failure", stdout.String())
	}
	// A failing reader: its error, after what it delivered.
	readErr := errors.New("connection reset")
	stdout.Reset()
	n, err := demux(&stdout, &stdout, io.MultiReader(strings.NewReader(frame(1, "abc")+frame(1, "de")[:9]), iotest.ErrReader(readErr)))
	if !errors.Is(err, readErr) || n != 4 || stdout.String() != "abcd" {
		t.Errorf("demux() with a failing reader = %d, %v, output %q; want 4, %v, %q", n, err, stdout.String(), readErr, "abcd")
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

// TestVolumeTarget: the container path of each form of a volumes entry,
// which decides whether it replaces the builds or cache volume.
func TestVolumeTarget(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/cache", "/cache"},
		{"/srv/cache:/cache", "/cache"},
		{"/srv/cache:/cache/:ro", "/cache"},
		{"named:/builds:rw", "/builds"},
		{"/a:/data", "/data"},
	} {
		if got := volumeTarget(tc.in); got != tc.want {
			t.Errorf("volumeTarget(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRFC1123: the build container's host name as GitLab Runner makes it.
func TestRFC1123(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"runner-AbC_12-project-7-concurrent-0", "runner-abc12-project-7-concurrent-0"},
		{"--x", "x"},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
	} {
		if got := rfc1123(tc.in); got != tc.want {
			t.Errorf("rfc1123(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
