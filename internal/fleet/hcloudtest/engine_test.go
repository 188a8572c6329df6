package hcloudtest_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet/hcloudtest"
)

// TestDockerMachinesEngine: a machine of DockerMachinesWith with Engine
// runs its own Docker engine, with the dockerd flags EngineArgs gives,
// and authorises the key for root over SSH; Stop removes its container
// and the volume of its /var/lib/docker.
func TestDockerMachinesEngine(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const registry = "192.0.2.1:5000"
	m := hcloudtest.DockerMachinesWith(t, hcloudtest.DockerOptions{Engine: true, EngineArgs: []string{"--insecure-registry=" + registry}})
	key := newKey(t)
	ip, err := m.Start(ctx, "engine-0", []string{publicKeyOf(t, key)})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	c := machineContainers(t, "engine-0")
	if len(c) != 1 {
		t.Fatalf("containers of the machine: %v, want 1", c)
	}
	var vol string
	for _, mt := range c[0].Mounts {
		if mt.Destination == "/var/lib/docker" {
			vol = mt.Name
		}
	}
	if vol == "" {
		t.Errorf("machine has no volume at /var/lib/docker: %+v", c[0].Mounts)
	}
	if out := runSSH(ctx, t, connectInfo(ip, "root", key), "echo ok"); out != "ok\n" {
		t.Errorf("ssh root@%s echo ok = %q", ip, out)
	}

	// The engine starts after sshd: wait for it (its start is not an
	// event this side can see).
	var out []byte
	deadline := time.Now().Add(time.Minute)
	for {
		out, err = exec.CommandContext(ctx, "docker", "exec", c[0].ID, "docker", "info", "--format", "{{json .RegistryConfig.IndexConfigs}}").CombinedOutput()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the machine's engine does not answer: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), registry) {
		t.Errorf("the machine's engine does not take the flag --insecure-registry=%s: %s", registry, out)
	}

	if err := m.Stop(ctx, "engine-0"); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if left := machineContainers(t, "engine-0"); len(left) != 0 {
		t.Errorf("container left after Stop: %v", left[0].ID)
	}
	if vol != "" {
		if _, err := dockertest.Engine(t).VolumeInspect(ctx, vol); !cerrdefs.IsNotFound(err) {
			t.Errorf("volume %s of /var/lib/docker after Stop: %v; want it removed", vol, err)
		}
	}
}

// connectInfo is how runSSH reaches a machine Machines.Start returned.
func connectInfo(ip, user string, key []byte) provider.ConnectInfo {
	return provider.ConnectInfo{ConnectorConfig: provider.ConnectorConfig{Username: user, Key: key}, ExternalAddr: ip}
}

// publicKeyOf is the authorized_keys line of private key key.
func publicKeyOf(t *testing.T, key []byte) string {
	t.Helper()
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}
