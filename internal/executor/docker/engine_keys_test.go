package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// keyCase is one [runners.docker] setting tried on the real engine: the
// engine's inspect of what the job's Prepare created, and what a script
// of the job sees.
type keyCase struct {
	name string
	body string // keys of [runners.docker] (TOML)
	// The job: a service (drover-test-busybox:1 sleeping), an entrypoint
	// for its image.
	service    bool
	entrypoint []string
	// image is the job's image (default drover-test-busybox:1);
	// resumable prepares the job as a manager with a job store does
	// (its stages run detached, followed by drover's helper: helperBinary
	// is the drover binary its helper image is built from).
	image        string
	resumable    bool
	helperBinary string
	// prepareErr: Prepare fails with an error containing it (the case's
	// checks then look at the containers made); reason: a refusal of the
	// job's, with that failure reason.
	prepareErr string
	reason     api.FailureReason
	// The engine's view of the build container, the service container
	// and the job's network.
	build func(t *testing.T, c container.InspectResponse)
	svc   func(t *testing.T, c container.InspectResponse)
	net   func(t *testing.T, n network.Inspect)
	// script runs as the job's build script; its output must contain
	// "RESULT:"+want. cgroupV1: it reads cgroup v1 files (skipped on a
	// cgroup v2 engine).
	script, want string
	cgroupV1     bool
	// svcExec runs in the service container; its output must contain
	// svcWant.
	svcExec []string
	svcWant string
	// after checks what is left once the job's resources are removed
	// (made: the job's containers as they were, by role).
	after func(t *testing.T, e *Executor, made map[string][]container.InspectResponse)
	trace string // the job's log contains it
}

// TestEngineContainerKeys: each [runners.docker] key drover hands to the
// engine, on the real engine. The job is prepared as a manager does it
// (config.toml parsed, Prepare, a build script, Cleanup); the engine's
// inspect shows the setting on the container or network the executor
// made, and a script of the job (or a command in its service) sees it
// where this engine can show it. gpus and service_gpus are checked on
// the created container only: this machine has no GPU, so the engine
// refuses to start it.
func TestEngineContainerKeys(t *testing.T) {
	cli := realEngine(t)
	info, err := cli.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v1 := info.CgroupVersion != "2"
	token := "keys" + randomHex(t, 4)
	tag := token[4:]
	t.Cleanup(func() { removeRunnerVolumes(t, cli, token) })

	// A container whose volume volumes_from takes, and one links reach.
	data := startAside(t, cli, "drover-test-data-"+tag, "/shared", "from volumes_from")
	peer := startAside(t, cli, "drover-test-peer-"+tag, "", "")
	cgroupParent, svcCgroupParent := "/drover-test-"+tag, "/drover-test-svc-"+tag
	t.Cleanup(func() { removeCgroups(cgroupParent, svcCgroupParent) })

	hc := func(f func(t *testing.T, h *container.HostConfig)) func(*testing.T, container.InspectResponse) {
		return func(t *testing.T, c container.InspectResponse) { t.Helper(); f(t, c.HostConfig) }
	}
	cases := []keyCase{
		{name: "runtime", body: `runtime = "runc"`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "Runtime", h.Runtime, "runc") }),
			script: `echo "RESULT:ran"`, want: "ran"},
		{name: "runtime unknown", body: `runtime = "drover-no-such-runtime"`,
			prepareErr: "drover-no-such-runtime", reason: api.RunnerConfigurationError},
		{name: "ulimit", body: "[runners.docker.ulimit]\n  nofile = \"1000:2000\"\n  nproc = \"500\"",
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "Ulimits", h.Ulimits, []*container.Ulimit{{Name: "nofile", Soft: 1000, Hard: 2000}, {Name: "nproc", Soft: 500, Hard: 500}})
			}),
			script: `echo "RESULT:$(ulimit -n):$(ulimit -Hn):$(ulimit -u)"`, want: "1000:2000:500"},
		{name: "userns_mode", body: `userns_mode = "host"`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "UsernsMode", h.UsernsMode, "host") }),
			script: `echo "RESULT:$(id -u)"`, want: "0"},
		{name: "mac_address", body: `mac_address = "92:d0:c6:0a:29:33"`,
			build: func(t *testing.T, c container.InspectResponse) {
				for name, ep := range c.NetworkSettings.Networks {
					equal(t, "MacAddress on "+name, ep.MacAddress, "92:d0:c6:0a:29:33")
				}
			},
			script: `echo "RESULT:$(cat /sys/class/net/eth0/address)"`, want: "92:d0:c6:0a:29:33"},
		{name: "network_mtu on the slot's network", body: `network_mtu = 1300`,
			net: func(t *testing.T, n network.Inspect) {
				equal(t, "Options[mtu]", n.Options[networkMTUOption], "1300")
				if !strings.HasSuffix(n.Name, "-mtu1300") {
					t.Errorf("slot network %s: want its name to end with -mtu1300", n.Name)
				}
			},
			script: `echo "RESULT:$(cat /sys/class/net/eth0/mtu)"`, want: "1300"},
		{name: "extra_hosts and dns_search through the slot's sandbox", body: "extra_hosts = [\"drover-extra.example:10.1.2.3\"]\ndns_search = [\"drover.example\"]",
			script: `echo "RESULT:$(grep -c '10.1.2.3.*drover-extra.example' /etc/hosts)$(grep -c '^search.*drover.example' /etc/resolv.conf)"`, want: "11"},
		{name: "network_mtu on the job's network", body: `network_mtu = 1280`, service: true,
			net:    func(t *testing.T, n network.Inspect) { equal(t, "Options[mtu]", n.Options[networkMTUOption], "1280") },
			script: `echo "RESULT:$(cat /sys/class/net/eth0/mtu)"`, want: "1280"},
		{name: "enable_ipv6", body: `enable_ipv6 = true`, service: true,
			net: func(t *testing.T, n network.Inspect) {
				equal(t, "EnableIPv6", n.EnableIPv6, true)
				var v6 bool
				for _, c := range n.IPAM.Config {
					v6 = v6 || strings.Contains(c.Subnet, ":")
				}
				if !v6 {
					t.Errorf("IPAM %+v: no IPv6 subnet", n.IPAM.Config)
				}
			},
			// A unique local address (fdxx:...) on eth0, from the network.
			script: `grep '^fd' /proc/net/if_inet6 | grep -q eth0 && echo "RESULT:unique local address"`, want: "unique local address"},
		{name: "oom_score_adjust", body: `oom_score_adjust = 300`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "OomScoreAdj", h.OomScoreAdj, 300) }),
			script: `echo "RESULT:$(cat /proc/self/oom_score_adj)"`, want: "300"},
		{name: "cpu_shares", body: `cpu_shares = 512`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "CPUShares", h.CPUShares, int64(512)) }),
			script: `echo "RESULT:$(cat /sys/fs/cgroup/cpu/cpu.shares)"`, want: "512", cgroupV1: true},
		{name: "memory_reservation", body: "memory = \"256m\"\nmemory_reservation = \"64m\"",
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "MemoryReservation", h.MemoryReservation, int64(64<<20))
			}),
			script: `echo "RESULT:$(cat /sys/fs/cgroup/memory/memory.soft_limit_in_bytes)"`, want: "67108864", cgroupV1: true},
		{name: "hostname", body: `hostname = "drover-ci-host"`,
			build: func(t *testing.T, c container.InspectResponse) {
				equal(t, "Hostname", c.Config.Hostname, "drover-ci-host")
			},
			script: `echo "RESULT:$(hostname)"`, want: "drover-ci-host",
			after: func(t *testing.T, e *Executor, _ map[string][]container.InspectResponse) {
				equal(t, "ScriptHostname()", e.ScriptHostname(), "drover-ci-host")
			}},
		{name: "volumes_from", body: fmt.Sprintf(`volumes_from = ["%s:ro"]`, data),
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "VolumesFrom", h.VolumesFrom, []string{data + ":ro"})
			}),
			script: `echo "RESULT:$(cat /shared/content)"`, want: "from volumes_from"},
		{name: "cgroup_parent", body: fmt.Sprintf(`cgroup_parent = "%s"`, cgroupParent),
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "CgroupParent", h.CgroupParent, cgroupParent) }),
			script: `grep -q ':` + cgroupParent + `/' /proc/self/cgroup && echo "RESULT:in-parent"`, want: "in-parent"},
		{name: "cpuset_mems", body: `cpuset_mems = "0"`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "CpusetMems", h.CpusetMems, "0") }),
			script: `echo "RESULT:$(cat /sys/fs/cgroup/cpuset/cpuset.mems)"`, want: "0", cgroupV1: true},
		{name: "group_add", body: `group_add = ["4321"]`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "GroupAdd", h.GroupAdd, []string{"4321"}) }),
			script: `echo "RESULT:$(id -G | tr ' ' '\n' | grep -x 4321)"`, want: "4321"},
		{name: "ipcmode", body: `ipcmode = "none"`,
			build:  hc(func(t *testing.T, h *container.HostConfig) { equal(t, "IpcMode", h.IpcMode, "none") }),
			script: `if grep -q ' /dev/shm ' /proc/mounts; then echo RESULT:shm; else echo RESULT:no-shm; fi`, want: "no-shm"},
		{name: "pid_mode", body: `pid_mode = "host"`,
			build: hc(func(t *testing.T, h *container.HostConfig) { equal(t, "PidMode", h.PidMode, "host") }),
			// In a pid namespace of its own, the build container's pid 1
			// is its idle sh.
			script: `[ "$(cat /proc/1/comm)" != sh ] && echo "RESULT:host-pid-1"`, want: "host-pid-1"},
		{name: "links", body: fmt.Sprintf(`links = ["%s:linked-peer"]`, peer),
			build: func(t *testing.T, c container.InspectResponse) {
				equal(t, "HostConfig.Links", c.HostConfig.Links, []string(nil))
				for name, ep := range c.NetworkSettings.Networks {
					equal(t, "Links on "+name, ep.Links, []string{peer + ":linked-peer"})
				}
			},
			script: `ping -c 1 -W 5 linked-peer >/dev/null && echo "RESULT:reached"`, want: "reached",
			after: func(t *testing.T, _ *Executor, _ map[string][]container.InspectResponse) {
				ins, err := cli.ContainerInspect(t.Context(), peer)
				if err != nil {
					t.Fatal(err)
				}
				for name := range ins.NetworkSettings.Networks {
					if name != "bridge" {
						t.Errorf("the linked container is still on %s after the job", name)
					}
				}
			}},
		{name: "log_options", body: "[runners.docker.log_options]\n  env = \"CI_JOB_ID\"",
			// The engine adds its default log options (daemon.json's)
			// to a container of its default driver.
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "LogConfig", []string{h.LogConfig.Type, h.LogConfig.Config["env"]}, []string{"json-file", "CI_JOB_ID"})
			}),
			script: `echo "RESULT:logged"`, want: "logged"},
		{name: "device_cgroup_rules", body: `device_cgroup_rules = ["c 42:* rmw"]`,
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "DeviceCgroupRules", h.DeviceCgroupRules, []string{"c 42:* rmw"})
			}),
			script: `grep -q '^c 42:\* rwm$' /sys/fs/cgroup/devices/devices.list && echo "RESULT:allowed"`, want: "allowed", cgroupV1: true},
		{name: "volume_driver and volume_driver_ops", body: "volume_driver = \"local\"\n[runners.docker.volume_driver_ops]\n  type = \"tmpfs\"\n  device = \"tmpfs\"\n  o = \"size=16m\"",
			build: func(t *testing.T, c container.InspectResponse) {
				equal(t, "VolumeDriver", c.HostConfig.VolumeDriver, "local")
				for _, m := range c.Mounts {
					if m.Destination != buildsDir {
						continue
					}
					v, err := cli.VolumeInspect(t.Context(), m.Name)
					if err != nil {
						t.Fatal(err)
					}
					equal(t, "builds volume "+v.Name, []any{v.Driver, v.Options}, []any{"local", map[string]string{"type": "tmpfs", "device": "tmpfs", "o": "size=16m"}})
				}
			},
			script: `echo "RESULT:$(grep ' /builds ' /proc/mounts | cut -d' ' -f3)"`, want: "tmpfs"},
		{name: "volume_keep", body: "volume_keep = true\nvolumes = [\"/anon\"]",
			trace: "volume_keep is set",
			after: anonymousVolume(cli, true)},
		{name: "anonymous volumes go without volume_keep", body: `volumes = ["/anon"]`,
			after: anonymousVolume(cli, false)},
		{name: "gpus", body: `gpus = "count=all,capabilities=compute"`,
			prepareErr: "capabilities",
			build: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "DeviceRequests", h.DeviceRequests, []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"compute", "gpu"}}, Options: map[string]string{}}})
			})},
		{name: "disable_entrypoint_overwrite", body: `disable_entrypoint_overwrite = true`,
			// This entrypoint would end the container at once.
			entrypoint: []string{"sh", "-c", "exit 3"},
			build: func(t *testing.T, c container.InspectResponse) {
				equal(t, "Entrypoint", []string(c.Config.Entrypoint), []string(nil))
			},
			script: `echo "RESULT:image's own entrypoint"`, want: "image's own entrypoint",
			trace: "the runner sets disable_entrypoint_overwrite"},
		{name: "the job's entrypoint without disable_entrypoint_overwrite", entrypoint: []string{"sh", "-c", "exit 3"},
			prepareErr: "did not start its shell"},
		{name: "service_* and services_*", service: true, body: fmt.Sprintf(`cap_add = ["NET_ADMIN"]
cpu_shares = 1024
service_cpu_shares = 256
service_cpus = "0.5"
service_cpuset_cpus = "0"
service_memory = "64m"
service_memory_swap = "128m"
service_memory_reservation = "32m"
service_cgroup_parent = "%s"
services_security_opt = ["no-new-privileges"]
[runners.docker.services_devices]
  "drover-test-*" = ["/dev/zero:/dev/svc-zero"]
  "other:*" = ["/dev/null:/dev/not-here"]`, svcCgroupParent),
			svc: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "service limits", []any{h.CPUShares, h.NanoCPUs, h.CpusetCpus, h.Memory, h.MemorySwap, h.MemoryReservation, h.CgroupParent},
					[]any{int64(256), int64(5e8), "0", int64(64 << 20), int64(128 << 20), int64(32 << 20), svcCgroupParent})
				equal(t, "SecurityOpt", h.SecurityOpt, []string{"no-new-privileges"})
				equal(t, "CapAdd", h.CapAdd, []string(nil))
				equal(t, "Devices", h.Devices, []container.DeviceMapping{{PathOnHost: "/dev/zero", PathInContainer: "/dev/svc-zero", CgroupPermissions: "rwm"}})
			}),
			build: hc(func(t *testing.T, h *container.HostConfig) {
				// The client writes capabilities as CAP_...
				equal(t, "build CPUShares, CapAdd", []any{h.CPUShares, []string(h.CapAdd)}, []any{int64(1024), []string{"CAP_NET_ADMIN"}})
			}),
			svcExec: []string{"sh", "-c", "cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/memory/memory.limit_in_bytes; ls /dev/svc-zero; grep -c " + svcCgroupParent + "/ /proc/self/cgroup"},
			svcWant: "256\n67108864\n/dev/svc-zero\n", cgroupV1: true,
			script: `echo "RESULT:$(cat /sys/fs/cgroup/cpu/cpu.shares)"`, want: "1024"},
		{name: "service_gpus", service: true, body: `service_gpus = "1"`,
			prepareErr: "gpu",
			svc: hc(func(t *testing.T, h *container.HostConfig) {
				equal(t, "DeviceRequests", h.DeviceRequests, []container.DeviceRequest{{Count: 1, Capabilities: [][]string{{"gpu"}}, Options: map[string]string{}}})
			})},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has a slot of its own: its own slot networks and
			// builds volume.
			t.Parallel()
			if tc.cgroupV1 && !v1 {
				tc.script, tc.svcExec = "", nil
				t.Log("cgroup v2 engine: the cgroup v1 checks are skipped")
			}
			runKeyCase(t, cli, token, i, tc)
		})
	}
}

// runKeyCase prepares a job with the case's [runners.docker] on slot i of
// the runner token, checks it, runs its script and removes it.
func runKeyCase(t *testing.T, cli *dockerclient.Client, token string, i int, tc keyCase) {
	helper := "helper_image = \"" + dockerimage.TestImageBusybox + "\"\n"
	if tc.helperBinary != "" {
		helper = ""
	}
	cfg := parseDockerTable(t, "[runners.docker]\n"+
		"pull_policy = \"if-not-present\"\n"+helper+"wait_for_services_timeout = -1\n"+
		tc.body+"\n")
	p, err := NewProvider(Options{Lookup: func(executor.Settings) (*Config, error) { return cfg, nil }, Dialer: fixedDialer{cli}, HelperBinary: tc.helperBinary})
	if err != nil {
		t.Fatal(err)
	}
	job := &api.JobResponse{
		ID: 990100 + int64(i), Token: "keys-token",
		JobInfo: api.JobInfo{ProjectID: 42, ProjectFullPath: "g/p"},
		Image:   api.Image{Name: orDefault(tc.image, dockerimage.TestImageBusybox), Entrypoint: tc.entrypoint},
	}
	if tc.service {
		job.Services = []api.Image{{Name: dockerimage.TestImageBusybox, Alias: "svc", Command: []string{"sleep", "3600"}}}
	}
	ex := p.Create().(*Executor)
	trace := &executortest.Trace{}
	s := executor.Settings{ShortToken: token, SystemID: "s_keys", RunnerName: "keys", ConcurrentID: i, Resumable: tc.resumable}
	ctx := t.Context()
	prepErr := ex.Prepare(ctx, executor.PrepareOptions{Job: job, Settings: s, Trace: trace})
	var made map[string][]container.InspectResponse
	defer func() {
		cleanupJob(t, ex, p)
		if tc.after != nil {
			tc.after(t, ex, made)
		}
		if tc.trace != "" && !strings.Contains(trace.String(), tc.trace) {
			t.Errorf("the job's log lacks %q:\n%s", tc.trace, trace)
		}
	}()
	switch {
	case tc.prepareErr == "" && prepErr != nil:
		t.Fatalf("Prepare = %v\n%s", prepErr, trace)
	case tc.prepareErr != "" && (prepErr == nil || !strings.Contains(prepErr.Error(), tc.prepareErr)):
		t.Fatalf("Prepare = %v, want an error containing %q", prepErr, tc.prepareErr)
	case tc.prepareErr != "":
		t.Logf("Prepare = %v", prepErr)
		var be *executor.BuildError
		if tc.reason != "" && (!errors.As(prepErr, &be) || be.Reason != tc.reason) {
			t.Errorf("Prepare = %v, want a refusal with reason %s", prepErr, tc.reason)
		}
	}

	made = jobContainers(t, cli, ex)
	check := func(role string, f func(*testing.T, container.InspectResponse)) {
		if f == nil {
			return
		}
		if len(made[role]) == 0 {
			t.Fatalf("no %s container was made", role)
		}
		f(t, made[role][0])
	}
	check(roleBuild, tc.build)
	check(roleService, tc.svc)
	if tc.net != nil {
		name := ex.netName
		if id, ok := strings.CutPrefix(name, "container:"); ok {
			// The slot's sandbox (sandbox.go): the network is its.
			ins, err := cli.ContainerInspect(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			name = string(ins.HostConfig.NetworkMode)
		}
		n, err := cli.NetworkInspect(ctx, name, network.InspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tc.net(t, n)
	}
	if prepErr != nil {
		return
	}
	if len(tc.svcExec) > 0 {
		var out bytes.Buffer
		code, err := ex.execAttached(ctx, made[roleService][0].ID, "", tc.svcExec, nil, &out, &out)
		if err != nil || code != 0 || !strings.Contains(out.String(), tc.svcWant) {
			t.Errorf("in the service: %q = exit %d, %v, output %q; want %q", tc.svcExec, code, err, out.String(), tc.svcWant)
		}
	}
	if tc.script != "" {
		before := len(trace.String())
		if err := ex.Run(ctx, executor.Command{Stage: executor.StageStepScript, Script: tc.script + "\n"}); err != nil {
			t.Fatalf("Run(%q) = %v\n%s", tc.script, err, trace.String()[before:])
		}
		if out := trace.String()[before:]; !strings.Contains(out, "RESULT:"+tc.want+"\n") {
			t.Errorf("the job's script printed %q, want RESULT:%s", out, tc.want)
		}
	}
}

// cleanupJob removes what a test's job made, as a manager does after its
// result: the executor's Cleanup, the provider's background removals, and
// the slot networks.
func cleanupJob(t *testing.T, ex *Executor, p *Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 2*time.Minute)
	defer cancel()
	ex.Cleanup(ctx)
	if err := p.Wait(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if err := p.RemoveSlotNetworks(ctx); err != nil {
		t.Errorf("RemoveSlotNetworks: %v", err)
	}
}

// jobContainers inspects every container the executor made, by role.
func jobContainers(t *testing.T, cli *dockerclient.Client, e *Executor) map[string][]container.InspectResponse {
	t.Helper()
	e.mu.Lock()
	ids := slices.Clone(e.containers)
	e.mu.Unlock()
	out := map[string][]container.InspectResponse{}
	for _, id := range ids {
		ins, err := cli.ContainerInspect(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		role := ins.Config.Labels[LabelRole]
		out[role] = append(out[role], ins)
	}
	return out
}

// anonymousVolume checks after a job with volumes = ["/anon"] that the
// build container's anonymous volume is kept (then removes it) or gone.
func anonymousVolume(cli *dockerclient.Client, kept bool) func(*testing.T, *Executor, map[string][]container.InspectResponse) {
	return func(t *testing.T, _ *Executor, made map[string][]container.InspectResponse) {
		var name string
		for _, m := range made[roleBuild][0].Mounts {
			if m.Destination == "/anon" {
				name = m.Name
			}
		}
		if name == "" {
			t.Fatalf("the build container has no volume at /anon: %+v", made[roleBuild][0].Mounts)
		}
		_, err := cli.VolumeInspect(t.Context(), name)
		switch {
		case kept && err != nil:
			t.Errorf("anonymous volume %s: %v, want it kept", name, err)
		case !kept && err == nil:
			t.Errorf("anonymous volume %s is still there", name)
		case kept:
			if err := cli.VolumeRemove(t.Context(), name, true); err != nil {
				t.Error(err)
			}
		}
	}
}

// startAside starts a container of no job named name (sleeping), with a
// volume at dir holding the file content with text when dir is set.
func startAside(t *testing.T, cli *dockerclient.Client, name, dir, text string) string {
	t.Helper()
	ctx := t.Context()
	cc := &container.Config{Image: dockerimage.TestImageBusybox, Cmd: []string{"sleep", "3600"}}
	if dir != "" {
		cc.Volumes = map[string]struct{}{dir: {}}
	}
	resp, err := cli.ContainerCreate(ctx, cc, &container.HostConfig{}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if dir != "" {
		tarball, err := dockerimage.FileTar("content", 0o644, []byte(text+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.CopyToContainer(ctx, resp.ID, dir, tarball, container.CopyToContainerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// removeRunnerVolumes removes the builds and cache volumes of runner
// token.
func removeRunnerVolumes(t *testing.T, cli *dockerclient.Client, token string) {
	ctx := context.WithoutCancel(t.Context())
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: labelFilter(LabelRunner + "=" + token)})
	if err != nil {
		t.Error(err)
		return
	}
	for _, v := range vols.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil {
			t.Errorf("remove volume %s: %v", v.Name, err)
		}
	}
}

// removeCgroups removes the (empty) cgroups the engine made as parents,
// in every hierarchy; best effort: they are empty once the job is gone.
func removeCgroups(names ...string) {
	for _, n := range names {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + n)
		dirs = append(dirs, "/sys/fs/cgroup"+n)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, diff)
	}
}

// orDefault is s, or def when s is "".
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
