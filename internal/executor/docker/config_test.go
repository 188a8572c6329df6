package docker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/drover-ci/drover/internal/config"
)

// runnerHead is a [[runners]] entry without its docker table; what a test
// appends starts at line 7.
const runnerHead = `concurrent = 1
[[runners]]
  name = "r"
  url = "https://gitlab.example.com"
  token = "glrt-abcdefghijklmnop"
  executor = "docker"
`

// parseDocker parses runnerHead+body with the config package, so that
// lines are real, and reads the docker table of its first runner.
func parseDocker(t *testing.T, body string) (*Config, []config.Warning, error) {
	t.Helper()
	cfg, _, err := config.Parse("config.toml", []byte(runnerHead+body))
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, body)
	}
	return ParseConfig("config.toml", &cfg.Runners[0])
}

func defaults() *Config {
	return &Config{
		PullPolicy:             []PullPolicy{PullAlways},
		AllowedPullPolicies:    []PullPolicy{PullAlways},
		WaitForServicesTimeout: 30 * time.Second,
		ServicesLimit:          -1,
		NetworkSandbox:         true,
		BuildStandby:           true,
	}
}

func TestParseConfigDefaults(t *testing.T) {
	for _, body := range []string{"", "[runners.docker]\n", "[runners.docker]\n  pull_policy = []\n  allowed_pull_policies = []\n  wait_for_services_timeout = 0\n"} {
		c, warnings, err := parseDocker(t, body)
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%q: ParseConfig() warnings %v, error %v", body, warnings, err)
		}
		if diff := cmp.Diff(defaults(), c); diff != "" {
			t.Errorf("%q: ParseConfig() mismatch (-want +got):\n%s", body, diff)
		}
	}
}

func TestParseConfigEveryKey(t *testing.T) {
	body := `[runners.docker]
  host = "tcp://10.0.0.1:2376"
  tls_verify = true
  tls_cert_path = "/etc/docker/certs"
  image = "alpine:3.20"
  pull_policy = ["if-not-present", "always"]
  allowed_pull_policies = ["always", "if-not-present", "never"]
  allowed_images = ["ruby:*", "registry.example.com/**"]
  allowed_services = ["postgres:*"]
  allowed_privileged_images = ["docker:*-dind"]
  allowed_privileged_services = ["docker:dind"]
  privileged = true
  services_privileged = false
  user = "1000:1000"
  volumes = ["/cache", "/srv/data:/data:ro", "named:/named", "/a:/b:rw"]
  cache_dir = "/var/cache/drover"
  disable_cache = true
  network_mode = "bridge"
  network_sandbox = false
  build_standby = false
  dns = ["1.1.1.1", "2606:4700:4700::1111"]
  dns_search = ["example.com"]
  extra_hosts = ["db:10.0.0.5", "gw:host-gateway"]
  memory = "512m"
  memory_swap = "1g"
  cpus = "1.5"
  cpuset_cpus = "0-3,6"
  shm_size = 268435456
  cap_add = ["NET_ADMIN"]
  cap_drop = ["ALL"]
  security_opt = ["no-new-privileges"]
  devices = ["/dev/fuse", "/dev/kvm:/dev/kvm:rw"]
  oom_kill_disable = true
  wait_for_services_timeout = 90
  services_limit = 2
  helper_image = "registry.example.com/drover-helper:1"
  [runners.docker.tmpfs]
    "/tmp" = "rw,size=64m"
  [runners.docker.services_tmpfs]
    "/var/lib/postgresql/data" = ""
  [runners.docker.sysctls]
    "net.ipv4.ip_forward" = "1"
  [runners.docker.container_labels]
    "com.example.team" = "ci"
  [[runners.docker.services]]
    name = "postgres:16"
    alias = "db, pg"
    command = ["postgres", "-c", "fsync=off"]
    entrypoint = ["docker-entrypoint.sh"]
    environment = ["POSTGRES_PASSWORD=x", "EMPTY="]
  [[runners.docker.services]]
    name = "redis"
`
	c, warnings, err := parseDocker(t, body)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ParseConfig() warnings %v, error %v", warnings, err)
	}
	no := false
	want := &Config{
		Host:                      "tcp://10.0.0.1:2376",
		TLSVerify:                 true,
		TLSCertPath:               "/etc/docker/certs",
		Image:                     "alpine:3.20",
		PullPolicy:                []PullPolicy{PullIfNotPresent, PullAlways},
		AllowedPullPolicies:       []PullPolicy{PullAlways, PullIfNotPresent, PullNever},
		AllowedImages:             []string{"ruby:*", "registry.example.com/**"},
		AllowedServices:           []string{"postgres:*"},
		AllowedPrivilegedImages:   []string{"docker:*-dind"},
		AllowedPrivilegedServices: []string{"docker:dind"},
		Privileged:                true,
		ServicesPrivileged:        &no,
		User:                      "1000:1000",
		Volumes:                   []string{"/cache", "/srv/data:/data:ro", "named:/named", "/a:/b:rw"},
		CacheDir:                  "/var/cache/drover",
		DisableCache:              true,
		NetworkMode:               "bridge",
		DNS:                       []string{"1.1.1.1", "2606:4700:4700::1111"},
		DNSSearch:                 []string{"example.com"},
		ExtraHosts:                []string{"db:10.0.0.5", "gw:host-gateway"},
		Memory:                    512 << 20,
		MemorySwap:                1 << 30,
		NanoCPUs:                  1_500_000_000,
		CPUSetCPUs:                "0-3,6",
		ShmSize:                   256 << 20,
		Tmpfs:                     map[string]string{"/tmp": "rw,size=64m"},
		ServicesTmpfs:             map[string]string{"/var/lib/postgresql/data": ""},
		CapAdd:                    []string{"NET_ADMIN"},
		CapDrop:                   []string{"ALL"},
		SecurityOpt:               []string{"no-new-privileges"},
		Devices:                   []string{"/dev/fuse", "/dev/kvm:/dev/kvm:rw"},
		Sysctls:                   map[string]string{"net.ipv4.ip_forward": "1"},
		OOMKillDisable:            true,
		WaitForServicesTimeout:    90 * time.Second,
		ServicesLimit:             2,
		HelperImage:               "registry.example.com/drover-helper:1",
		ContainerLabels:           map[string]string{"com.example.team": "ci"},
		Services: []ServiceConfig{{
			Name:        "postgres:16",
			Alias:       "db, pg",
			Command:     []string{"postgres", "-c", "fsync=off"},
			Entrypoint:  []string{"docker-entrypoint.sh"},
			Environment: []string{"POSTGRES_PASSWORD=x", "EMPTY="},
		}, {Name: "redis"}},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("ParseConfig() mismatch (-want +got):\n%s", diff)
	}
}

// TestParseConfigContainerKeys: every key GitLab Runner hands to the
// engine, read into Config at once.
func TestParseConfigContainerKeys(t *testing.T) {
	body := `[runners.docker]
  runtime = "runc"
  hostname = "ci-build"
  userns_mode = "host"
  mac_address = "92:d0:c6:0a:29:33"
  cgroup_parent = "/drover-ci"
  cpuset_mems = "0"
  ipcmode = "shareable"
  pid_mode = "host"
  cpu_shares = 512
  memory = "1g"
  memory_reservation = "256m"
  oom_score_adjust = 300
  group_add = ["4321", "audio"]
  links = ["db:database"]
  volumes_from = ["data:ro"]
  device_cgroup_rules = ["c 42:* rmw"]
  gpus = "count=2,driver=nvidia,capabilities=compute;utility,options=a=b"
  disable_entrypoint_overwrite = true
  network_mtu = 1300
  enable_ipv6 = true
  volume_driver = "local"
  volume_keep = true
  service_memory = "128m"
  service_memory_swap = "-1"
  service_memory_reservation = "64m"
  service_cpus = "0.5"
  service_cpu_shares = 128
  service_cpuset_cpus = "0"
  service_cgroup_parent = "/drover-svc"
  service_gpus = "all"
  services_security_opt = ["no-new-privileges"]
  [runners.docker.ulimit]
    nofile = "1024:2048"
    nproc = "512"
  [runners.docker.log_options]
    env = "CI_JOB_ID"
  [runners.docker.volume_driver_ops]
    type = "tmpfs"
    device = "tmpfs"
  [runners.docker.services_devices]
    "postgres:*" = ["/dev/fuse"]
`
	c, warnings, err := parseDocker(t, body)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ParseConfig() warnings %v, error %v", warnings, err)
	}
	want := defaults()
	want.Memory = 1 << 30
	want.Runtime, want.Hostname, want.UsernsMode, want.MacAddress = "runc", "ci-build", "host", "92:d0:c6:0a:29:33"
	want.CgroupParent, want.CPUSetMems, want.IpcMode, want.PidMode = "/drover-ci", "0", "shareable", "host"
	want.CPUShares, want.MemoryReservation, want.OOMScoreAdjust = 512, 256<<20, 300
	want.GroupAdd, want.Links, want.VolumesFrom = []string{"4321", "audio"}, []string{"db:database"}, []string{"data:ro"}
	want.DeviceCgroupRules = []string{"c 42:* rmw"}
	want.Ulimits = []*units.Ulimit{{Name: "nofile", Soft: 1024, Hard: 2048}, {Name: "nproc", Soft: 512, Hard: 512}}
	want.LogOptions = map[string]string{"env": "CI_JOB_ID"}
	want.GPUs = []container.DeviceRequest{{Driver: "nvidia", Count: 2, Capabilities: [][]string{{"compute;utility", "gpu"}}, Options: map[string]string{"a": "b"}}}
	want.DisableEntrypointOverwrite, want.NetworkMTU, want.EnableIPv6 = true, 1300, true
	want.VolumeDriver, want.VolumeDriverOpts, want.VolumeKeep = "local", map[string]string{"type": "tmpfs", "device": "tmpfs"}, true
	want.ServiceMemory, want.ServiceMemorySwap, want.ServiceMemoryReservation = 128<<20, -1, 64<<20
	want.ServiceNanoCPUs, want.ServiceCPUShares, want.ServiceCPUSetCPUs, want.ServiceCgroupParent = 5e8, 128, "0", "/drover-svc"
	want.ServiceGPUs = []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}, Options: map[string]string{}}}
	want.ServicesDevices = []ServiceDevices{{Pattern: "postgres:*", Devices: []string{"/dev/fuse"}}}
	want.ServicesSecurityOpt = []string{"no-new-privileges"}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("ParseConfig() mismatch (-want +got):\n%s", diff)
	}
}

// TestParseGPUs: docker run's --gpus syntax, as the engine's device
// request.
func TestParseGPUs(t *testing.T) {
	gpu := [][]string{{"gpu"}}
	cases := []struct {
		in   string
		want container.DeviceRequest
		err  string
	}{
		{in: "all", want: container.DeviceRequest{Count: -1, Capabilities: gpu, Options: map[string]string{}}},
		{in: "2", want: container.DeviceRequest{Count: 2, Capabilities: gpu, Options: map[string]string{}}},
		{in: "count=all", want: container.DeviceRequest{Count: -1, Capabilities: gpu, Options: map[string]string{}}},
		{in: "device=GPU-3a23c669", want: container.DeviceRequest{DeviceIDs: []string{"GPU-3a23c669"}, Capabilities: gpu, Options: map[string]string{}}},
		{in: `"device=0,2"`, want: container.DeviceRequest{DeviceIDs: []string{"0", "2"}, Capabilities: gpu, Options: map[string]string{}}},
		{in: `driver=nvidia,"capabilities=compute,utility",count=1`, want: container.DeviceRequest{Driver: "nvidia", Count: 1,
			Capabilities: [][]string{{"compute", "utility", "gpu"}}, Options: map[string]string{}}},
		{in: `"options=a=1,b"`, want: container.DeviceRequest{Count: 1, Capabilities: gpu, Options: map[string]string{"a": "1", "b": ""}}},
		{in: "0", want: container.DeviceRequest{Count: 0, Capabilities: gpu, Options: map[string]string{}}},
		{in: "-1", err: `count "-1" is neither "all" nor a number`},
		{in: "all,2", err: "count given twice"},
		{in: "device=", err: "an empty device id"},
		{in: "gpus=1", err: `unknown key "gpus"`},
		{in: `"device=0`, err: "extraneous or missing"},
	}
	for _, tc := range cases {
		got, err := parseGPUs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseGPUs(%q) = %+v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseGPUs(%q) error = %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseGPUs(%q) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestParseConfigValues checks single keys: the value read, or the error
// with its key path and line (the key is on line 8 unless the test says).
func TestParseConfigValues(t *testing.T) {
	tests := []struct {
		name  string
		body  string // after "[runners.docker]\n" (line 7)
		check func(c *Config) any
		want  any
		err   string // "line: key: message substring"
	}{
		// pull policies
		{name: "pull_policy string", body: `pull_policy = "never"`, check: func(c *Config) any { return [][]PullPolicy{c.PullPolicy, c.AllowedPullPolicies} }, want: [][]PullPolicy{{PullNever}, {PullNever}}},
		{name: "pull_policy array", body: `pull_policy = ["never", "if-not-present"]`, check: func(c *Config) any { return c.PullPolicy }, want: []PullPolicy{PullNever, PullIfNotPresent}},
		{name: "pull_policy unknown", body: `pull_policy = "sometimes"`, err: `8: runners[0].docker.pull_policy: "sometimes" is not a pull policy`},
		{name: "pull_policy empty string", body: `pull_policy = ""`, err: `8: runners[0].docker.pull_policy: "" is not a pull policy`},
		{name: "pull_policy bad element", body: `pull_policy = ["always", "Always"]`, err: `8: runners[0].docker.pull_policy[1]: "Always" is not a pull policy`},
		{name: "pull_policy not a string", body: `pull_policy = ["always", 1]`, err: `8: runners[0].docker.pull_policy[1]: must be a string, not an integer`},
		{name: "pull_policy type", body: `pull_policy = true`, err: `8: runners[0].docker.pull_policy: must be a pull policy or an array of them, not a boolean`},
		{name: "allowed_pull_policies string", body: `allowed_pull_policies = "if-not-present"` + "\npull_policy = \"if-not-present\"", check: func(c *Config) any { return c.AllowedPullPolicies }, want: []PullPolicy{PullIfNotPresent}},
		{name: "allowed_pull_policies unknown", body: `allowed_pull_policies = ["always", "nope"]`, err: `8: runners[0].docker.allowed_pull_policies[1]: "nope" is not a pull policy`},

		// strings and booleans
		{name: "host unix", body: `host = "unix:///run/user/1000/docker.sock"`, check: func(c *Config) any { return c.Host }, want: "unix:///run/user/1000/docker.sock"},
		{name: "host ssh", body: `host = "ssh://me@build-host"`, check: func(c *Config) any { return c.Host }, want: "ssh://me@build-host"},
		{name: "host without scheme", body: `host = "10.0.0.1:2376"`, err: `8: runners[0].docker.host: "10.0.0.1:2376" is not a docker host`},
		{name: "host type", body: `host = 1`, err: `8: runners[0].docker.host: must be a string, not an integer`},
		{name: "tls_verify type", body: `tls_verify = "yes"`, err: `8: runners[0].docker.tls_verify: must be a boolean, not a string`},
		{name: "image type", body: `image = ["alpine"]`, err: `8: runners[0].docker.image: must be a string, not an array`},
		{name: "privileged type", body: `privileged = 1`, err: `8: runners[0].docker.privileged: must be a boolean, not an integer`},
		{name: "services_privileged true", body: `services_privileged = true`, check: func(c *Config) any { return c.ServicesPrivileged != nil && *c.ServicesPrivileged }, want: true},
		{name: "services_privileged absent", body: `privileged = true`, check: func(c *Config) any { return c.ServicesPrivileged == nil && c.Privileged }, want: true},
		{name: "services_privileged type", body: `services_privileged = "no"`, err: `8: runners[0].docker.services_privileged: must be a boolean, not a string`},
		{name: "disable_cache type", body: `disable_cache = 0`, err: `8: runners[0].docker.disable_cache: must be a boolean, not an integer`},
		{name: "oom_kill_disable type", body: `oom_kill_disable = "true"`, err: `8: runners[0].docker.oom_kill_disable: must be a boolean, not a string`},
		{name: "user type", body: `user = 1000`, err: `8: runners[0].docker.user: must be a string, not an integer`},
		{name: "cache_dir type", body: `cache_dir = false`, err: `8: runners[0].docker.cache_dir: must be a string, not a boolean`},
		{name: "network_mode type", body: `network_mode = 1`, err: `8: runners[0].docker.network_mode: must be a string, not an integer`},
		{name: "helper_image type", body: `helper_image = 1`, err: `8: runners[0].docker.helper_image: must be a string, not an integer`},
		{name: "tls_cert_path type", body: `tls_cert_path = 1`, err: `8: runners[0].docker.tls_cert_path: must be a string, not an integer`},

		// lists
		{name: "allowed_images bad pattern", body: `allowed_images = ["ruby:*", "[ruby"]`, err: `8: runners[0].docker.allowed_images[1]: "[ruby" is not a valid pattern`},
		{name: "allowed_services bad pattern", body: `allowed_services = ["{a,b"]`, err: `8: runners[0].docker.allowed_services[0]: "{a,b" is not a valid pattern`},
		{name: "allowed_privileged_images bad pattern", body: `allowed_privileged_images = ["x\\"]`, err: `8: runners[0].docker.allowed_privileged_images[0]: "x\\" is not a valid pattern`},
		{name: "allowed_privileged_services type", body: `allowed_privileged_services = "docker:dind"`, err: `8: runners[0].docker.allowed_privileged_services: must be an array of strings, not a string`},
		{name: "dns not an address", body: `dns = ["1.1.1.1", "dns.example.com"]`, err: `8: runners[0].docker.dns[1]: "dns.example.com" is not an IP address`},
		{name: "dns_search type", body: `dns_search = [1]`, err: `8: runners[0].docker.dns_search[0]: must be a string, not an integer`},
		{name: "extra_hosts equals", body: `extra_hosts = ["db=10.0.0.5"]`, check: func(c *Config) any { return c.ExtraHosts }, want: []string{"db=10.0.0.5"}},
		{name: "extra_hosts no address", body: `extra_hosts = ["db:10.0.0.5", "db"]`, err: `8: runners[0].docker.extra_hosts[1]: "db" is not a host entry`},
		{name: "cap_add type", body: `cap_add = "NET_ADMIN"`, err: `8: runners[0].docker.cap_add: must be an array of strings, not a string`},
		{name: "cap_drop type", body: `cap_drop = [true]`, err: `8: runners[0].docker.cap_drop[0]: must be a string, not a boolean`},
		{name: "security_opt type", body: `security_opt = 1`, err: `8: runners[0].docker.security_opt: must be an array of strings, not an integer`},
		{name: "devices bad permissions", body: `devices = ["/dev/kvm:/dev/kvm:rwx"]`, err: `8: runners[0].docker.devices[0]: "/dev/kvm:/dev/kvm:rwx" is not a device`},
		{name: "devices relative container path", body: `devices = ["/dev/fuse", "/dev/kvm:kvm"]`, err: `8: runners[0].docker.devices[1]: "/dev/kvm:kvm" is not a device`},

		// volumes
		{name: "volumes every form", body: `volumes = ["/anon", "/host:/c", "/host:/c:ro", "/host:/c:RW", "vol:/c", "/h:/c:ro,z", "/h:/c:z", "/h:/c:rshared", "/h:/c:ro:z:rprivate"]`, check: func(c *Config) any { return len(c.Volumes) }, want: 9},
		{name: "volumes relative container path", body: `volumes = ["/cache", "/srv:/ok", "/srv:data"]`, err: `8: runners[0].docker.volumes[2]: "/srv:data" is not a volume`},
		{name: "volumes relative anonymous", body: `volumes = ["cache"]`, err: `8: runners[0].docker.volumes[0]: "cache" is not a volume`},
		{name: "volumes bad mode", body: `volumes = ["/a:/b:rx"]`, err: `8: runners[0].docker.volumes[0]: "/a:/b:rx" is not a volume`},
		{name: "volumes relative host path", body: `volumes = ["./a:/b"]`, err: `8: runners[0].docker.volumes[0]: "./a:/b" is not a volume`},
		{name: "volumes empty", body: `volumes = [""]`, err: `8: runners[0].docker.volumes[0]: "" is not a volume`},
		{name: "volumes on a later line", body: "volumes = [\n  \"/ok\",\n  \"bad\",\n]", err: `10: runners[0].docker.volumes[1]: "bad" is not a volume`},

		// sizes
		{name: "memory units", body: `memory = "1.5g"`, check: func(c *Config) any { return c.Memory }, want: int64(3 << 29)},
		{name: "memory bytes string", body: `memory = "134217728"`, check: func(c *Config) any { return c.Memory }, want: int64(128 << 20)},
		{name: "memory integer", body: `memory = 134217728`, check: func(c *Config) any { return c.Memory }, want: int64(128 << 20)},
		{name: "memory MiB", body: `memory = "128MiB"`, check: func(c *Config) any { return c.Memory }, want: int64(128 << 20)},
		{name: "memory with space", body: `memory = "128 m"`, check: func(c *Config) any { return c.Memory }, want: int64(128 << 20)},
		{name: "memory empty", body: `memory = ""`, check: func(c *Config) any { return c.Memory }, want: int64(0)},
		{name: "memory bad unit", body: `memory = "128x"`, err: `8: runners[0].docker.memory: "128x" is not a size`},
		{name: "memory no number", body: `memory = "m"`, err: `8: runners[0].docker.memory: "m" is not a size`},
		{name: "memory exponent", body: `memory = "1e3m"`, err: `8: runners[0].docker.memory: "1e3m" is not a size`},
		{name: "memory too large", body: `memory = "99999999999p"`, err: `8: runners[0].docker.memory: "99999999999p" is not a size: too large`},
		{name: "memory negative", body: `memory = "-1"`, err: `8: runners[0].docker.memory: must not be negative`},
		{name: "memory negative integer", body: `memory = -5`, err: `8: runners[0].docker.memory: must not be negative (got -5)`},
		{name: "memory type", body: `memory = 1.5`, err: `8: runners[0].docker.memory: must be a size string such as "512m", not a float`},
		{name: "memory_swap unlimited", body: "memory = \"1g\"\nmemory_swap = \"-1\"", check: func(c *Config) any { return c.MemorySwap }, want: int64(-1)},
		{name: "memory_swap unlimited integer", body: "memory = \"1g\"\nmemory_swap = -1", check: func(c *Config) any { return c.MemorySwap }, want: int64(-1)},
		{name: "memory_swap below memory", body: "memory = \"1g\"\nmemory_swap = \"512m\"", err: `9: runners[0].docker.memory_swap: 536870912 bytes is less than memory`},
		{name: "memory_swap without memory", body: `memory_swap = "1g"`, err: `8: runners[0].docker.memory_swap: needs memory`},
		{name: "memory_swap -2", body: `memory_swap = -2`, err: `8: runners[0].docker.memory_swap: must not be negative (got -2)`},
		{name: "shm_size", body: `shm_size = 0`, check: func(c *Config) any { return c.ShmSize }, want: int64(0)},
		{name: "shm_size string", body: `shm_size = "64m"`, err: `8: runners[0].docker.shm_size: must be an integer number of bytes, not a string`},
		{name: "shm_size negative", body: `shm_size = -1`, err: `8: runners[0].docker.shm_size: must not be negative (got -1)`},

		// cpus
		{name: "cpus integer string", body: `cpus = "2"`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(2e9)},
		{name: "cpus fraction", body: `cpus = "0.25"`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(25e7)},
		{name: "cpus leading dot", body: `cpus = ".5"`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(5e8)},
		{name: "cpus too precise is truncated", body: `cpus = "0.0000000015"`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(1)},
		{name: "cpus TOML float", body: `cpus = 1.5`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(15e8)},
		{name: "cpus TOML integer", body: `cpus = 3`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(3e9)},
		{name: "cpus empty", body: `cpus = ""`, check: func(c *Config) any { return c.NanoCPUs }, want: int64(0)},
		{name: "cpus negative", body: `cpus = "-1"`, err: `8: runners[0].docker.cpus: must not be negative (got -1)`},
		{name: "cpus negative float", body: `cpus = -0.5`, err: `8: runners[0].docker.cpus: must not be negative (got -0.5)`},
		{name: "cpus garbage", body: `cpus = "two"`, err: `8: runners[0].docker.cpus: "two" is not a number of CPUs`},
		{name: "cpus exponent", body: `cpus = "1e100000000"`, err: `8: runners[0].docker.cpus: "1e100000000" is not a number of CPUs`},
		{name: "cpus nan", body: `cpus = nan`, err: `8: runners[0].docker.cpus: "NaN" is not a number of CPUs`},
		{name: "cpus too many", body: `cpus = "99999999999"`, err: `8: runners[0].docker.cpus: 99999999999 CPUs is too many`},
		{name: "cpus type", body: `cpus = true`, err: `8: runners[0].docker.cpus: must be a number of CPUs such as "1.5", not a boolean`},
		{name: "cpuset_cpus", body: `cpuset_cpus = "0,2-3"`, check: func(c *Config) any { return c.CPUSetCPUs }, want: "0,2-3"},
		{name: "cpuset_cpus bad", body: `cpuset_cpus = "3-1"`, err: `8: runners[0].docker.cpuset_cpus: "3-1" is not a list of CPUs`},
		{name: "cpuset_cpus garbage", body: `cpuset_cpus = "all"`, err: `8: runners[0].docker.cpuset_cpus: "all" is not a list of CPUs`},

		// tables
		{name: "tmpfs relative", body: "[runners.docker.tmpfs]\n  \"/ok\" = \"\"\n  \"tmp\" = \"rw\"", err: `10: runners[0].docker.tmpfs.tmp: "tmp" is not an absolute container path`},
		{name: "tmpfs value type", body: "[runners.docker.tmpfs]\n  \"/tmp\" = 1", err: `9: runners[0].docker.tmpfs."/tmp": must be a string, not an integer`},
		{name: "tmpfs type", body: `tmpfs = ["/tmp"]`, err: `8: runners[0].docker.tmpfs: must be a table, not an array`},
		{name: "services_tmpfs relative", body: "[runners.docker.services_tmpfs]\n  data = \"\"", err: `9: runners[0].docker.services_tmpfs.data: "data" is not an absolute container path`},
		{name: "sysctls value type", body: "[runners.docker.sysctls]\n  \"net.core.somaxconn\" = 1024", err: `9: runners[0].docker.sysctls."net.core.somaxconn": must be a string, not an integer`},
		{name: "sysctls type", body: `sysctls = "x"`, err: `8: runners[0].docker.sysctls: must be a table, not a string`},
		{name: "container_labels drover prefix", body: "[runners.docker.container_labels]\n  team = \"ci\"\n  \"io.drover.job\" = \"1\"", err: `10: runners[0].docker.container_labels."io.drover.job": labels starting with "io.drover." are drover's own`},
		{name: "container_labels value type", body: "[runners.docker.container_labels]\n  team = true", err: `9: runners[0].docker.container_labels.team: must be a string, not a boolean`},
		{name: "container_labels other io prefix", body: "[runners.docker.container_labels]\n  \"io.droverx\" = \"1\"", check: func(c *Config) any { return c.ContainerLabels }, want: map[string]string{"io.droverx": "1"}},

		// timeouts and limits
		{name: "wait_for_services_timeout disabled", body: `wait_for_services_timeout = -1`, check: func(c *Config) any { return c.WaitForServicesTimeout < 0 }, want: true},
		{name: "wait_for_services_timeout 0 is the default", body: `wait_for_services_timeout = 0`, check: func(c *Config) any { return c.WaitForServicesTimeout }, want: 30 * time.Second},
		{name: "wait_for_services_timeout seconds", body: `wait_for_services_timeout = 5`, check: func(c *Config) any { return c.WaitForServicesTimeout }, want: 5 * time.Second},
		{name: "wait_for_services_timeout -2", body: `wait_for_services_timeout = -2`, err: `8: runners[0].docker.wait_for_services_timeout: must be a number of seconds, 0 for the default (30) or -1 to not wait (got -2)`},
		{name: "wait_for_services_timeout string", body: `wait_for_services_timeout = "30s"`, err: `8: runners[0].docker.wait_for_services_timeout: must be an integer number of seconds, not a string`},
		{name: "wait_for_services_timeout huge", body: `wait_for_services_timeout = 9223372036854775807`, err: `8: runners[0].docker.wait_for_services_timeout: 9223372036854775807 seconds is too long`},
		{name: "prepull_images", body: `prepull_images = ["a:1", "b"]`, check: func(c *Config) any { return strings.Join(c.PrepullImages, ",") }, want: "a:1,b"},
		{name: "prepull_images empty entry", body: `prepull_images = ["a", " "]`, err: `8: runners[0].docker.prepull_images[1]: must not be empty`},
		{name: "prepull_recent", body: `prepull_recent = 3`, check: func(c *Config) any { return c.PrepullRecent }, want: 3},
		{name: "prepull_recent negative", body: `prepull_recent = -1`, err: `8: runners[0].docker.prepull_recent: must not be negative (got -1)`},
		{name: "engine_ready_timeout", body: `engine_ready_timeout = "90s"`, check: func(c *Config) any { return c.EngineReadyTimeout }, want: 90 * time.Second},
		{name: "engine_ready_timeout bad", body: `engine_ready_timeout = "soon"`, err: `8: runners[0].docker.engine_ready_timeout: "soon" is not a duration`},
		{name: "engine_ready_timeout zero", body: `engine_ready_timeout = "0s"`, err: `8: runners[0].docker.engine_ready_timeout: must be positive`},
		{name: "services_limit 0", body: `services_limit = 0`, check: func(c *Config) any { return c.ServicesLimit }, want: 0},
		{name: "services_limit -1", body: `services_limit = -1`, check: func(c *Config) any { return c.ServicesLimit }, want: -1},
		{name: "services_limit -2", body: `services_limit = -2`, err: `8: runners[0].docker.services_limit: must be -1 (unlimited) or more (got -2)`},
		{name: "services_limit huge", body: `services_limit = 4294967296`, err: `8: runners[0].docker.services_limit: 4294967296 is too large`},
		{name: "services_limit type", body: `services_limit = 1.0`, err: `8: runners[0].docker.services_limit: must be an integer, not a float`},

		// services
		{name: "services inline", body: `services = [{name = "redis:7", alias = "cache"}]`, check: func(c *Config) any { return c.Services }, want: []ServiceConfig{{Name: "redis:7", Alias: "cache"}}},
		{name: "services as strings", body: `services = ["redis"]`, err: `8: runners[0].docker.services: must be an array of tables ([[runners.docker.services]] with name = "image"), not an array`},
		{name: "services name missing", body: "[[runners.docker.services]]\n  name = \"a\"\n[[runners.docker.services]]\n  alias = \"b\"", err: `10: runners[0].docker.services[1]: name: missing`},
		{name: "services name empty", body: "[[runners.docker.services]]\n  name = \"\"", err: `9: runners[0].docker.services[0].name: must not be empty`},
		{name: "services name type", body: "[[runners.docker.services]]\n  name = 1", err: `9: runners[0].docker.services[0].name: must be a string, not an integer`},
		{name: "services command type", body: "[[runners.docker.services]]\n  name = \"a\"\n  command = \"run\"", err: `10: runners[0].docker.services[0].command: must be an array of strings, not a string`},
		{name: "services entrypoint element", body: "[[runners.docker.services]]\n  name = \"a\"\n  entrypoint = [\"sh\", 1]", err: `10: runners[0].docker.services[0].entrypoint[1]: must be a string, not an integer`},
		{name: "services environment", body: "[[runners.docker.services]]\n  name = \"a\"\n  environment = [\"A=1\", \"B\"]", err: `10: runners[0].docker.services[0].environment[1]: "B" is not a variable`},
		{name: "services environment empty name", body: "[[runners.docker.services]]\n  name = \"a\"\n  environment = [\"=1\"]", err: `10: runners[0].docker.services[0].environment[0]: "=1" is not a variable`},
		{name: "services alias type", body: "[[runners.docker.services]]\n  name = \"a\"\n  alias = [\"b\"]", err: `10: runners[0].docker.services[0].alias: must be a string, not an array`},

		// container settings
		{name: "runtime", body: `runtime = "runc"`, check: func(c *Config) any { return c.Runtime }, want: "runc"},
		{name: "runtime type", body: `runtime = true`, err: `8: runners[0].docker.runtime: must be a string, not a boolean`},
		{name: "hostname", body: `hostname = "build-1.ci.example"`, check: func(c *Config) any { return c.Hostname }, want: "build-1.ci.example"},
		{name: "hostname space", body: `hostname = "my host"`, err: `8: runners[0].docker.hostname: "my host" is not a host name`},
		{name: "hostname too long", body: `hostname = "` + strings.Repeat("h", 65) + `"`, err: `8: runners[0].docker.hostname: "hhhh`},
		{name: "hostname leading dash", body: `hostname = "-x"`, err: `8: runners[0].docker.hostname: "-x" is not a host name`},
		{name: "userns_mode host", body: `userns_mode = "host"`, check: func(c *Config) any { return c.UsernsMode }, want: "host"},
		{name: "userns_mode other", body: `userns_mode = "private"`, err: `8: runners[0].docker.userns_mode: "private" is not a mode: want host`},
		{name: "mac_address", body: `mac_address = "92:d0:c6:0a:29:33"`, check: func(c *Config) any { return c.MacAddress }, want: "92:d0:c6:0a:29:33"},
		{name: "mac_address bad", body: `mac_address = "92:d0:c6:0a:29"`, err: `8: runners[0].docker.mac_address: "92:d0:c6:0a:29" is not a MAC address`},
		{name: "mac_address eui64", body: `mac_address = "92:d0:c6:0a:29:33:44:55"`, err: `8: runners[0].docker.mac_address: "92:d0:c6:0a:29:33:44:55" is not a MAC address`},
		{name: "mac_address multicast", body: `mac_address = "01:00:5e:00:00:01"`, err: `8: runners[0].docker.mac_address: "01:00:5e:00:00:01" is a multicast address`},
		{name: "mac_address with network_mode host", body: "network_mode = \"host\"\nmac_address = \"92:d0:c6:0a:29:33\"", err: `9: runners[0].docker.mac_address: cannot be set with network_mode "host"`},
		{name: "cgroup_parent", body: `cgroup_parent = "/ci"`, check: func(c *Config) any { return c.CgroupParent }, want: "/ci"},
		{name: "cpuset_mems", body: `cpuset_mems = "0-1"`, check: func(c *Config) any { return c.CPUSetMems }, want: "0-1"},
		{name: "cpuset_mems bad", body: `cpuset_mems = "node0"`, err: `8: runners[0].docker.cpuset_mems: "node0" is not a list of CPUs`},
		{name: "ipcmode container", body: `ipcmode = "container:db"`, check: func(c *Config) any { return c.IpcMode }, want: "container:db"},
		{name: "ipcmode shareable", body: `ipcmode = "shareable"`, check: func(c *Config) any { return c.IpcMode }, want: "shareable"},
		{name: "ipcmode bad", body: `ipcmode = "shared"`, err: `8: runners[0].docker.ipcmode: "shared" is not a mode: want none, private, shareable, host or container:<name>`},
		{name: "ipcmode empty container", body: `ipcmode = "container:"`, err: `8: runners[0].docker.ipcmode: "container:" is not a mode`},
		{name: "pid_mode host", body: `pid_mode = "host"`, check: func(c *Config) any { return c.PidMode }, want: "host"},
		{name: "pid_mode bad", body: `pid_mode = "private"`, err: `8: runners[0].docker.pid_mode: "private" is not a mode: want host or container:<name>`},
		{name: "cpu_shares", body: `cpu_shares = 512`, check: func(c *Config) any { return c.CPUShares }, want: int64(512)},
		{name: "cpu_shares negative", body: `cpu_shares = -1`, err: `8: runners[0].docker.cpu_shares: must be from 0 to 262144 (got -1)`},
		{name: "cpu_shares string", body: `cpu_shares = "512"`, err: `8: runners[0].docker.cpu_shares: must be an integer, not a string`},
		{name: "memory_reservation", body: `memory_reservation = "64m"`, check: func(c *Config) any { return c.MemoryReservation }, want: int64(64 << 20)},
		{name: "memory_reservation above memory", body: "memory = \"64m\"\nmemory_reservation = \"128m\"", err: `9: runners[0].docker.memory_reservation: 134217728 bytes is more than memory`},
		{name: "memory_reservation bad", body: `memory_reservation = "lots"`, err: `8: runners[0].docker.memory_reservation: "lots" is not a size`},
		{name: "oom_score_adjust", body: `oom_score_adjust = -500`, check: func(c *Config) any { return c.OOMScoreAdjust }, want: -500},
		{name: "oom_score_adjust too high", body: `oom_score_adjust = 1001`, err: `8: runners[0].docker.oom_score_adjust: must be from -1000 to 1000 (got 1001)`},
		{name: "group_add", body: `group_add = ["audio", "4321"]`, check: func(c *Config) any { return c.GroupAdd }, want: []string{"audio", "4321"}},
		{name: "group_add type", body: `group_add = [4321]`, err: `8: runners[0].docker.group_add[0]: must be a string, not an integer`},
		{name: "links", body: `links = ["db", "cache:redis"]`, check: func(c *Config) any { return c.Links }, want: []string{"db", "cache:redis"}},
		{name: "links empty alias", body: `links = ["db:"]`, err: `8: runners[0].docker.links[0]: "db:" is not a link`},
		{name: "links two colons", body: `links = ["ok", "a:b:c"]`, err: `8: runners[0].docker.links[1]: "a:b:c" is not a link`},
		{name: "volumes_from", body: `volumes_from = ["data", "cfg:ro"]`, check: func(c *Config) any { return c.VolumesFrom }, want: []string{"data", "cfg:ro"}},
		{name: "volumes_from bad mode", body: `volumes_from = ["data:rx"]`, err: `8: runners[0].docker.volumes_from[0]: "data:rx" is not a container to take volumes from`},
		{name: "device_cgroup_rules", body: `device_cgroup_rules = ["c 13:* rwm", "a *:* r", "b 8:0 m"]`, check: func(c *Config) any { return len(c.DeviceCgroupRules) }, want: 3},
		{name: "device_cgroup_rules bad", body: `device_cgroup_rules = ["c 13 rwm"]`, err: `8: runners[0].docker.device_cgroup_rules[0]: "c 13 rwm" is not a device cgroup rule`},
		{name: "ulimit", body: "[runners.docker.ulimit]\n  nofile = \"1024:2048\"\n  core = \"-1\"", check: func(c *Config) any { return c.Ulimits },
			want: []*units.Ulimit{{Name: "core", Soft: -1, Hard: -1}, {Name: "nofile", Soft: 1024, Hard: 2048}}},
		{name: "ulimit soft above hard", body: "[runners.docker.ulimit]\n  nofile = \"4096:1024\"", err: `9: runners[0].docker.ulimit.nofile: "4096:1024" is not a limit`},
		{name: "ulimit unknown name", body: "[runners.docker.ulimit]\n  files = \"1024\"", err: `9: runners[0].docker.ulimit.files: "1024" is not a limit: invalid ulimit type: files`},
		{name: "ulimit not a number", body: "[runners.docker.ulimit]\n  nofile = \"many\"", err: `9: runners[0].docker.ulimit.nofile: "many" is not a limit`},
		{name: "ulimit integer", body: "[runners.docker.ulimit]\n  nofile = 1024", err: `9: runners[0].docker.ulimit.nofile: must be a string, not an integer`},
		{name: "log_options", body: "[runners.docker.log_options]\n  env = \"CI_JOB_ID\"\n  labels = \"team\"", check: func(c *Config) any { return c.LogOptions }, want: map[string]string{"env": "CI_JOB_ID", "labels": "team"}},
		{name: "log_options max-size", body: "[runners.docker.log_options]\n  max-size = \"10m\"", err: `9: runners[0].docker.log_options.max-size: not a log option GitLab Runner allows`},
		{name: "gpus all", body: `gpus = "all"`, check: func(c *Config) any { return c.GPUs },
			want: []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}, Options: map[string]string{}}}},
		{name: "gpus bad key", body: `gpus = "devices=0"`, err: `8: runners[0].docker.gpus: "devices=0" is not a GPU request: unknown key "devices"`},
		{name: "gpus bad count", body: `gpus = "two"`, err: `8: runners[0].docker.gpus: "two" is not a GPU request`},
		{name: "disable_entrypoint_overwrite", body: `disable_entrypoint_overwrite = true`, check: func(c *Config) any { return c.DisableEntrypointOverwrite }, want: true},
		{name: "disable_entrypoint_overwrite type", body: `disable_entrypoint_overwrite = "true"`, err: `8: runners[0].docker.disable_entrypoint_overwrite: must be a boolean, not a string`},
		{name: "network_mtu", body: `network_mtu = 1300`, check: func(c *Config) any { return c.NetworkMTU }, want: 1300},
		{name: "network_mtu too small", body: `network_mtu = 67`, err: `8: runners[0].docker.network_mtu: must be 0 (the engine's default) or an MTU from 68 to 65535 (got 67)`},
		{name: "network_mtu type", body: `network_mtu = "1300"`, err: `8: runners[0].docker.network_mtu: must be an integer, not a string`},
		{name: "network_mtu below IPv6's", body: "enable_ipv6 = true\nnetwork_mtu = 1200", err: `9: runners[0].docker.network_mtu: 1200 is below IPv6's minimum MTU (1280)`},
		{name: "enable_ipv6", body: `enable_ipv6 = true`, check: func(c *Config) any { return c.EnableIPv6 }, want: true},
		{name: "volume_driver_ops", body: "volume_driver = \"local\"\n[runners.docker.volume_driver_ops]\n  type = \"tmpfs\"", check: func(c *Config) any { return []any{c.VolumeDriver, c.VolumeDriverOpts} },
			want: []any{"local", map[string]string{"type": "tmpfs"}}},
		{name: "volume_driver_ops value type", body: "[runners.docker.volume_driver_ops]\n  size = 1", err: `9: runners[0].docker.volume_driver_ops.size: must be a string, not an integer`},
		{name: "volume_keep type", body: `volume_keep = 1`, err: `8: runners[0].docker.volume_keep: must be a boolean, not an integer`},
		{name: "isolation bad", body: `isolation = "vm"`, err: `8: runners[0].docker.isolation: "vm" is not an isolation: want default, process or hyperv`},

		// the services' settings
		{name: "service limits", body: "service_memory = \"256m\"\nservice_memory_swap = \"512m\"\nservice_memory_reservation = \"128m\"\nservice_cpus = \"0.5\"\nservice_cpu_shares = 256\nservice_cpuset_cpus = \"0\"\nservice_cgroup_parent = \"/svc\"",
			check: func(c *Config) any {
				return []any{c.ServiceMemory, c.ServiceMemorySwap, c.ServiceMemoryReservation, c.ServiceNanoCPUs, c.ServiceCPUShares, c.ServiceCPUSetCPUs, c.ServiceCgroupParent}
			},
			want: []any{int64(256 << 20), int64(512 << 20), int64(128 << 20), int64(5e8), int64(256), "0", "/svc"}},
		{name: "service_memory_swap without service_memory", body: `service_memory_swap = "1g"`, err: `8: runners[0].docker.service_memory_swap: needs service_memory`},
		{name: "service_memory_swap below service_memory", body: "service_memory = \"1g\"\nservice_memory_swap = \"512m\"", err: `9: runners[0].docker.service_memory_swap: 536870912 bytes is less than service_memory`},
		{name: "service_memory_swap unlimited", body: "service_memory = \"1g\"\nservice_memory_swap = -1", check: func(c *Config) any { return c.ServiceMemorySwap }, want: int64(-1)},
		{name: "service_memory_reservation above service_memory", body: "service_memory = \"64m\"\nservice_memory_reservation = \"1g\"", err: `9: runners[0].docker.service_memory_reservation: 1073741824 bytes is more than service_memory`},
		{name: "service_cpus bad", body: `service_cpus = "half"`, err: `8: runners[0].docker.service_cpus: "half" is not a number of CPUs`},
		{name: "service_cpu_shares too many", body: `service_cpu_shares = 300000`, err: `8: runners[0].docker.service_cpu_shares: must be from 0 to 262144 (got 300000)`},
		{name: "service_cpuset_cpus bad", body: `service_cpuset_cpus = "1-0"`, err: `8: runners[0].docker.service_cpuset_cpus: "1-0" is not a list of CPUs`},
		{name: "service_gpus", body: `service_gpus = '"device=0,1",capabilities=compute'`, check: func(c *Config) any { return c.ServiceGPUs },
			want: []container.DeviceRequest{{DeviceIDs: []string{"0", "1"}, Capabilities: [][]string{{"compute", "gpu"}}, Options: map[string]string{}}}},
		{name: "service_gpus bad", body: `service_gpus = "count=1,count=2"`, err: `8: runners[0].docker.service_gpus: "count=1,count=2" is not a GPU request: count given twice`},
		{name: "services_devices", body: "[runners.docker.services_devices]\n  \"postgres:*\" = [\"/dev/fuse\"]\n  \"**/redis*\" = [\"/dev/a:/dev/b:r\"]",
			check: func(c *Config) any { return c.ServicesDevices },
			want:  []ServiceDevices{{Pattern: "**/redis*", Devices: []string{"/dev/a:/dev/b:r"}}, {Pattern: "postgres:*", Devices: []string{"/dev/fuse"}}}},
		{name: "services_devices bad device", body: "[runners.docker.services_devices]\n  \"postgres:*\" = [\"/dev/a:b\"]", err: `9: runners[0].docker.services_devices."postgres:*"[0]: "/dev/a:b" is not a device`},
		{name: "services_devices bad pattern", body: "[runners.docker.services_devices]\n  \"[pg\" = [\"/dev/fuse\"]", err: `9: runners[0].docker.services_devices."[pg": "[pg" is not a valid image pattern`},
		{name: "services_devices type", body: `services_devices = ["/dev/fuse"]`, err: `8: runners[0].docker.services_devices: must be a table, not an array`},
		{name: "services_security_opt", body: `services_security_opt = ["no-new-privileges"]`, check: func(c *Config) any { return c.ServicesSecurityOpt }, want: []string{"no-new-privileges"}},
		{name: "services_security_opt type", body: `services_security_opt = "no-new-privileges"`, err: `8: runners[0].docker.services_security_opt: must be an array of strings, not a string`},

		// the earliest error wins
		{name: "earliest line", body: "memory = \"x\"\ncpus = \"y\"", err: `8: runners[0].docker.memory: "x" is not a size`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := "[runners.docker]\n" + tc.body + "\n"
			c, _, err := parseDocker(t, body)
			if tc.err != "" {
				line, rest, _ := strings.Cut(tc.err, ": ")
				key, msg, _ := strings.Cut(rest, ": ")
				var cerr *config.Error
				if !errors.As(err, &cerr) {
					t.Fatalf("ParseConfig() error = %v (%T), config %+v; want *config.Error %q", err, err, c, tc.err)
				}
				if got := fmt.Sprint(cerr.Line); got != line || cerr.Key != key || !strings.Contains(cerr.Msg, msg) || cerr.File != "config.toml" {
					t.Fatalf("ParseConfig() error = %q; want line %s, key %s, message containing %q", err, line, key, msg)
				}
				if c != nil {
					t.Errorf("ParseConfig() = %+v with an error", c)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, tc.check(c)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseConfigWarnings: the keys drover reads without applying them
// are warnings with the reason, unknown keys too; each at its line.
func TestParseConfigWarnings(t *testing.T) {
	body := `[runners.docker]
  image = "alpine"
  isolation = "process"
  hostname = "build"
  imgae = "typo"
  helper_image_flavor = "ubuntu"
  network_mode = "ci-net"
  network_mtu = 1400
  enable_ipv6 = true
  service_slot_cgroup_template = "ci/slot-${slot}"
  isolation_level = 1
  [[runners.docker.services]]
    name = "pg"
    suspend_data_path = "/var/lib/postgresql"
    port = 5432
`
	c, warnings, err := parseDocker(t, body)
	if err != nil {
		t.Fatalf("ParseConfig() error = %v", err)
	}
	if c.Image != "alpine" || c.Hostname != "build" || len(c.Services) != 1 || c.NetworkMTU != 1400 || !c.EnableIPv6 {
		t.Errorf("ParseConfig() = %+v", c)
	}
	const (
		ignored = "GitLab Runner key read but not honoured by drover yet: it has no effect"
		unknown = "unknown key, ignored"
	)
	want := []string{
		"config.toml:9: runners[0].docker.isolation: " + whyIsolation,
		"config.toml:11: runners[0].docker.imgae: " + unknown,
		"config.toml:12: runners[0].docker.helper_image_flavor: " + whyFlavor,
		"config.toml:14: runners[0].docker.network_mtu: " + whyNetMode,
		"config.toml:15: runners[0].docker.enable_ipv6: " + whyNetMode,
		"config.toml:16: runners[0].docker.service_slot_cgroup_template: " + whySlotCG,
		"config.toml:17: runners[0].docker.isolation_level: " + unknown,
		"config.toml:20: runners[0].docker.services[0].suspend_data_path: " + ignored,
		"config.toml:21: runners[0].docker.services[0].port: " + unknown,
	}
	var got []string
	for _, w := range warnings {
		got = append(got, w.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
}

// gitlabDockerKeys are the [runners.docker] keys GitLab Runner documents,
// each with a value it accepts (not its default).
var gitlabDockerKeys = []struct{ key, value string }{
	{"host", `"unix:///var/run/docker.sock"`}, {"tls_cert_path", `"/certs"`}, {"tls_verify", "true"},
	{"image", `"alpine"`}, {"privileged", "true"}, {"services_privileged", "false"},
	{"pull_policy", `"always"`}, {"allowed_pull_policies", `["always"]`}, {"allowed_images", `["alpine:*"]`},
	{"allowed_services", `["postgres:*"]`}, {"allowed_privileged_images", `["docker:*"]`},
	{"allowed_privileged_services", `["docker:*"]`}, {"user", `"1000"`}, {"volumes", `["/cache"]`},
	{"cache_dir", `"/cache"`}, {"disable_cache", "true"}, {"network_mode", `"bridge"`},
	{"extra_hosts", `["db:10.0.0.5"]`}, {"dns", `["1.1.1.1"]`}, {"dns_search", `["example.com"]`},
	{"memory", `"1g"`}, {"memory_swap", `"2g"`}, {"cpus", `"2"`}, {"cpuset_cpus", `"0"`},
	{"devices", `["/dev/fuse"]`}, {"cap_add", `["NET_ADMIN"]`}, {"cap_drop", `["MKNOD"]`},
	{"security_opt", `["no-new-privileges"]`}, {"oom_kill_disable", "true"}, {"shm_size", "1024"},
	{"tmpfs", `{"/tmp" = ""}`}, {"services_tmpfs", `{"/tmp" = ""}`}, {"sysctls", `{"net.core.somaxconn" = "1024"}`},
	{"helper_image", `"helper:1"`}, {"container_labels", `{team = "ci"}`}, {"wait_for_services_timeout", "60"},
	{"services_limit", "2"}, {"services", `[{name = "redis"}]`}, {"allowed_users", `["root"]`},
	{"volumes_from", `["data"]`}, {"volume_driver", `"local"`}, {"volume_driver_ops", `{type = "tmpfs"}`},
	{"volume_keep", "true"}, {"disable_entrypoint_overwrite", "true"}, {"network_mtu", "1400"},
	{"enable_ipv6", "true"}, {"links", `["db"]`}, {"hostname", `"build"`}, {"mac_address", `"92:d0:c6:0a:29:33"`},
	{"memory_reservation", `"512m"`}, {"cpu_shares", "512"}, {"cpuset_mems", `"0"`}, {"cgroup_parent", `"/ci"`},
	{"gpus", `"all"`}, {"device_cgroup_rules", `["c 13:* rwm"]`}, {"oom_score_adjust", "100"},
	{"ulimit", `{nofile = "1024:2048"}`}, {"userns_mode", `"host"`}, {"pid_mode", `"host"`}, {"ipcmode", `"host"`},
	{"isolation", `"hyperv"`}, {"runtime", `"runc"`}, {"group_add", `["4321"]`}, {"helper_image_flavor", `"ubuntu"`},
	{"log_options", `{env = "CI"}`}, {"service_memory", `"1g"`}, {"service_memory_swap", `"2g"`},
	{"service_memory_reservation", `"512m"`}, {"service_cpus", `"1"`}, {"service_cpu_shares", "256"},
	{"service_cpuset_cpus", `"0"`}, {"service_cgroup_parent", `"/svc"`}, {"service_slot_cgroup_template", `"s-${slot}"`},
	{"service_gpus", `"1"`}, {"services_devices", `{"postgres:*" = ["/dev/fuse"]}`},
	{"services_security_opt", `["no-new-privileges"]`},
}

// TestParseConfigEveryGitLabKey: every key GitLab Runner documents for
// [runners.docker] is read, never reported as unknown; only those drover
// cannot apply (with network_mode set, the job network's two) are warned
// about, on their own line, and none is an error.
func TestParseConfigEveryGitLabKey(t *testing.T) {
	var b strings.Builder
	b.WriteString("[runners.docker]\n")
	for _, k := range gitlabDockerKeys {
		fmt.Fprintf(&b, "  %s = %s\n", k.key, k.value)
	}
	cfg, _, err := config.Parse("config.toml", []byte(runnerHead+b.String()))
	if err != nil {
		t.Fatal(err)
	}
	_, warnings, err := ParseConfig("config.toml", &cfg.Runners[0])
	if err != nil {
		t.Fatalf("ParseConfig() error = %v", err)
	}
	line := func(key string) int {
		for i, k := range gitlabDockerKeys {
			if k.key == key {
				return 8 + i
			}
		}
		return -1
	}
	want := map[string]string{
		"isolation": whyIsolation, "helper_image_flavor": whyFlavor, "service_slot_cgroup_template": whySlotCG,
		"network_mtu": whyNetMode, "enable_ipv6": whyNetMode,
	}
	got := map[string]string{}
	for _, w := range warnings {
		k := strings.TrimPrefix(w.Key, "runners[0].docker.")
		got[k] = w.Msg
		if w.Line != line(k) {
			t.Errorf("warning %s: line %d, want %d", w, w.Line, line(k))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
}

func TestParseConfigPullPolicyWarning(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{"pull_policy = \"always\"\nallowed_pull_policies = [\"never\"]",
			"config.toml:9: runners[0].docker.allowed_pull_policies: pull_policy ([always]) is not one of the allowed_pull_policies ([never]): jobs that do not set their own pull_policy fail"},
		{"allowed_pull_policies = [\"if-not-present\"]",
			"config.toml:8: runners[0].docker.allowed_pull_policies: the default pull_policy ([always]) is not one of the allowed_pull_policies ([if-not-present]): jobs that do not set their own pull_policy fail"},
		{"pull_policy = [\"never\", \"always\"]\nallowed_pull_policies = [\"always\"]", ""},
	}
	for _, tc := range tests {
		_, warnings, err := parseDocker(t, "[runners.docker]\n"+tc.body+"\n")
		if err != nil {
			t.Fatalf("%q: error %v", tc.body, err)
		}
		var got string
		if len(warnings) > 0 {
			got = warnings[0].String()
		}
		if len(warnings) > 1 || got != tc.want {
			t.Errorf("%q: warnings %v, want %q", tc.body, warnings, tc.want)
		}
	}
}

func TestParseConfigRunnerIndex(t *testing.T) {
	src := runnerHead + `[[runners]]
  name = "second"
  url = "https://gitlab.example.com"
  token = "glrt-qrstuvwxyzabcdef"
  executor = "docker"
  [runners.docker]
    memory = "lots"
`
	cfg, _, err := config.Parse("/etc/drover/config.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ParseConfig("/etc/drover/config.toml", &cfg.Runners[0]); err != nil {
		t.Errorf("runner 0: %v", err)
	}
	_, _, err = ParseConfig("/etc/drover/config.toml", &cfg.Runners[1])
	const want = `/etc/drover/config.toml:13: runners[1].docker.memory: "lots" is not a size: no number (want e.g. "512m", "1.5g")`
	if err == nil || err.Error() != want {
		t.Errorf("runner 1: error %v, want %s", err, want)
	}
}

func TestAllowedPull(t *testing.T) {
	tests := []struct {
		name      string
		pull      []PullPolicy
		allowed   []PullPolicy
		requested []string
		want      []PullPolicy
		err       string
	}{
		{name: "defaults", want: []PullPolicy{PullAlways}},
		{name: "defaults, job asks always", requested: []string{"always"}, want: []PullPolicy{PullAlways}},
		{name: "defaults, job asks never", requested: []string{"never"},
			err: "pull_policy ([never]) defined in GitLab pipeline config is not one of the allowed_pull_policies ([always])"},
		{name: "runner pull_policy", pull: []PullPolicy{PullIfNotPresent}, want: []PullPolicy{PullIfNotPresent}},
		{name: "runner pull_policy not allowed", pull: []PullPolicy{PullAlways}, allowed: []PullPolicy{PullNever},
			err: "pull_policy ([always]) defined in Runner config is not one of the allowed_pull_policies ([never])"},
		{name: "job policies all allowed", allowed: []PullPolicy{PullAlways, PullIfNotPresent, PullNever},
			requested: []string{"never", "if-not-present"}, want: []PullPolicy{PullNever, PullIfNotPresent}},
		{name: "job policies partly allowed", allowed: []PullPolicy{PullIfNotPresent},
			requested: []string{"always", "if-not-present"}, want: []PullPolicy{PullIfNotPresent}},
		{name: "job policies none allowed", allowed: []PullPolicy{PullIfNotPresent, PullNever},
			requested: []string{"always"},
			err:       "pull_policy ([always]) defined in GitLab pipeline config is not one of the allowed_pull_policies ([if-not-present never])"},
		{name: "repeats dropped", allowed: []PullPolicy{PullAlways, PullNever},
			requested: []string{"always", "always", "never"}, want: []PullPolicy{PullAlways, PullNever}},
		{name: "empty request is no request", pull: []PullPolicy{PullNever}, allowed: []PullPolicy{PullNever},
			requested: []string{}, want: []PullPolicy{PullNever}},
		{name: "unknown policy", requested: []string{"Always"},
			err: `unsupported pull_policy "Always" in GitLab pipeline config: want always, if-not-present or never`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults()
			if tc.pull != nil {
				c.PullPolicy = tc.pull
				c.AllowedPullPolicies = tc.pull
			}
			if tc.allowed != nil {
				c.AllowedPullPolicies = tc.allowed
			}
			got, err := c.AllowedPull(tc.requested)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("AllowedPull(%q) = %v, %v; want error %q", tc.requested, got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("AllowedPull(%q) error = %v", tc.requested, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AllowedPull(%q) mismatch (-want +got):\n%s", tc.requested, diff)
			}
		})
	}
}

func TestAllowedPullZeroConfig(t *testing.T) {
	var c Config
	if got, err := c.AllowedPull(nil); err != nil || len(got) != 1 || got[0] != PullAlways {
		t.Errorf("AllowedPull(nil) = %v, %v; want [always]", got, err)
	}
	_, err := c.AllowedPull([]string{"never"})
	if want := "pull_policy ([never]) defined in GitLab pipeline config is not one of the allowed_pull_policies ([always])"; err == nil || err.Error() != want {
		t.Errorf("AllowedPull([never]) error = %v, want %s", err, want)
	}
}

// FuzzParseConfig checks that ParseConfig never panics on what
// config.Parse accepts, that its errors are *config.Error values located
// in the runner's docker table, and that what it returns is usable.
func FuzzParseConfig(f *testing.F) {
	seeds := []string{
		"",
		"[runners.docker]\n",
		"[runners.docker]\n  memory = \"1g\"\n  memory_swap = \"-1\"\n  cpus = \"1.5\"\n",
		"[runners.docker]\n  pull_policy = [\"never\", 1]\n  allowed_pull_policies = \"always\"\n",
		"[runners.docker]\n  volumes = [\"/a:/b:ro\", \"x\"]\n  allowed_images = [\"{a,b\", \"[\", \"**/x\"]\n",
		"[runners.docker]\n  services = [{name = \"pg\", environment = [\"A\"]}]\n  [runners.docker.tmpfs]\n    x = 1\n",
		"[runners.docker]\n  wait_for_services_timeout = -9223372036854775808\n  services_limit = 9223372036854775807\n  shm_size = -1\n",
		"[runners.docker]\n  cpus = 1e300\n  memory = \"99999999999999999999999p\"\n  cpuset_cpus = \"-\"\n",
		"[runners.docker]\n  [runners.docker.container_labels]\n    \"io.drover.x\" = \"\"\n  [[runners.docker.services]]\n    alias = 1\n",
		"[runners.docker]\n  gpus = \"\\\"device=0,1\\\",count=1\"\n  ulimit = {nofile = \"1:2\", x = \"\"}\n  ipcmode = \"container:\"\n",
		"[runners.docker]\n  network_mtu = 65536\n  enable_ipv6 = true\n  mac_address = \"ff:ff:ff:ff:ff:ff\"\n  oom_score_adjust = -1001\n",
		"[runners.docker]\n  services_devices = {\"{a\" = [\"/dev/x\"], b = 1}\n  log_options = {env = \"A\", max-file = \"3\"}\n",
		"docker = 1\n",
		"docker = {services = \"x\", \"a.b\" = {c = 1}}\n",
	}
	for _, s := range seeds {
		f.Add(runnerHead + s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		cfg, _, err := config.Parse("config.toml", []byte(src))
		if err != nil {
			return
		}
		for i := range cfg.Runners {
			c, warnings, err := ParseConfig("config.toml", &cfg.Runners[i])
			prefix := fmt.Sprintf("runners[%d].docker", i)
			for _, w := range warnings {
				if w.File != "config.toml" || w.Line < 0 || !strings.HasPrefix(w.Key, prefix) {
					t.Errorf("warning %+v: bad position", w)
				}
			}
			if err != nil {
				var cerr *config.Error
				if !errors.As(err, &cerr) {
					t.Fatalf("ParseConfig() error = %T %v, want *config.Error", err, err)
				}
				if cerr.File != "config.toml" || cerr.Line < 0 || cerr.Msg == "" || !strings.HasPrefix(cerr.Key, prefix) {
					t.Fatalf("ParseConfig() error %+v: bad position or empty message", cerr)
				}
				if c != nil {
					t.Fatalf("ParseConfig() = %+v with error %v", c, err)
				}
				continue
			}
			if len(c.PullPolicy) == 0 || len(c.AllowedPullPolicies) == 0 || c.ServicesLimit < -1 ||
				c.Memory < 0 || c.MemorySwap < -1 || c.NanoCPUs < 0 || c.ShmSize < 0 || c.WaitForServicesTimeout == 0 ||
				c.OOMScoreAdjust < -1000 || c.OOMScoreAdjust > 1000 || c.NetworkMTU < 0 || c.NetworkMTU > 65535 ||
				c.CPUShares < 0 || c.ServiceCPUShares < 0 || c.MemoryReservation < 0 || c.ServiceMemory < 0 {
				t.Fatalf("ParseConfig() = %+v: not valid", c)
			}
			for _, s := range c.Services {
				if s.Name == "" {
					t.Fatalf("ParseConfig() service without a name: %+v", c.Services)
				}
			}
			for k := range c.ContainerLabels {
				if strings.HasPrefix(k, DroverLabelPrefix) {
					t.Fatalf("ParseConfig() kept label %q", k)
				}
			}
			_, _ = c.AllowedPull(nil)
			for _, p := range append(append(c.AllowedImages, c.AllowedServices...), c.AllowedPrivilegedImages...) {
				ImageAllowed([]string{p}, "registry.example.com:5000/group/image:tag")
			}
		}
	})
}

// GitLab Runner's defaults, which `gitlab-runner register` writes into
// every config.toml, draw no warning and ask for nothing.
func TestParseConfigDefaultsNotWarned(t *testing.T) {
	c, warnings, err := parseDocker(t, `[runners.docker]
  disable_entrypoint_overwrite = false
  network_mtu = 0
  enable_ipv6 = false
  hostname = ""
  volumes_from = []
  oom_score_adjust = 0
  cpu_shares = 0
  isolation = ""
  helper_image_flavor = ""
  service_slot_cgroup_template = ""
  volume_keep = false
  gpus = ""
  runtime = ""
  [runners.docker.ulimit]
`)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("ParseConfig of defaults = %v, warnings %v; want none", err, warnings)
	}
	if diff := cmp.Diff(defaults(), c, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ParseConfig of defaults mismatch (-want +got):\n%s", diff)
	}
	_, warnings, err = parseDocker(t, "[runners.docker]\n  isolation = \"default\"\n  network_mtu = 1400\n")
	if err != nil || len(warnings) != 0 {
		t.Errorf("ParseConfig of isolation default, network_mtu 1400 = %v, warnings %v; want none", err, warnings)
	}
}
