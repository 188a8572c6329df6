package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drover-ci/drover/internal/cachedir"
)

// DefaultStateDir is the state directory of the cluster when
// DROVER_KUBE_STATE is not set; up.sh and down.sh use the same default.
const DefaultStateDir = "/tmp/drover-kube"

// NodeName is the name of the cluster's only node.
const NodeName = "localhost"

// Env is a running test cluster, as up.sh describes it in
// $STATE/cluster.env. It holds no state of its own beyond these values:
// any number of Envs of the same cluster may be used at once.
type Env struct {
	// Host is the apiserver's URL (DROVER_KUBE_HOST).
	Host string
	// CAFile is the PEM file of the CA that signed the apiserver's
	// certificate (DROVER_KUBE_CA_FILE).
	CAFile string
	// Token is a bearer token of a cluster administrator
	// (DROVER_KUBE_TOKEN, group system:masters).
	Token string
	// Kubeconfig is a kubeconfig file for the cluster as that
	// administrator (DROVER_KUBE_KUBECONFIG), for kubectl when debugging.
	Kubeconfig string
	// Registry is the host:port of the registry the node pulls images
	// from and the Docker engine pushes to (DROVER_KUBE_REGISTRY).
	Registry string
	// StateDir is the cluster's state directory (DROVER_KUBE_STATE).
	StateDir string
}

// StateDir returns the state directory of the cluster: $DROVER_KUBE_STATE,
// else DefaultStateDir.
func StateDir() string {
	if d := os.Getenv("DROVER_KUBE_STATE"); d != "" {
		return d
	}
	return DefaultStateDir
}

// Cluster returns the test cluster, starting it with up.sh when it is not
// up (or not healthy) and leaving it running (see the package doc). It
// fails the test when the cluster cannot be started, naming what this
// machine lacks.
func Cluster(t testing.TB) *Env {
	t.Helper()
	ctx := t.Context()
	state := StateDir()
	env, err := readEnv(state)
	if err == nil {
		if err = env.check(ctx); err == nil {
			return env
		}
	}
	t.Logf("kubetest: test cluster in %s not usable (%v): starting it with up.sh", state, err)
	if missing := missingPrereqs(); len(missing) > 0 {
		t.Fatalf("kubetest: cannot run the test Kubernetes cluster on this machine, missing:\n  %s\n(scripts/test.sh installs and builds all of it)", strings.Join(missing, "\n  "))
	}
	start := time.Now()
	out, err := runUp(ctx, state)
	if err != nil {
		t.Fatalf("kubetest: scripts/kubecluster/up.sh: %v\n%s", err, out)
	}
	t.Logf("kubetest: started the test cluster in %v (it stays up; scripts/kubecluster/down.sh stops it)", time.Since(start).Round(time.Millisecond))
	if env, err = readEnv(state); err != nil {
		t.Fatalf("kubetest: after up.sh: %v\n%s", err, out)
	}
	if err := env.check(ctx); err != nil {
		t.Fatalf("kubetest: after up.sh: %v\n%s", err, out)
	}
	return env
}

// RESTConfig returns a new client configuration for the cluster as its
// administrator.
func (e *Env) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            e.Host,
		BearerToken:     e.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: e.CAFile},
		QPS:             100,
		Burst:           200,
	}
}

// Client returns a clientset for the cluster as its administrator.
func (e *Env) Client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.RESTConfig())
	if err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	return cs
}

// check reports whether the cluster answers and its node is Ready.
func (e *Env) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cs, err := kubernetes.NewForConfig(e.RESTConfig())
	if err != nil {
		return err
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("apiserver /readyz: %w", err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", NodeName, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready", NodeName)
}

// readEnv reads state/cluster.env, the KEY=value lines up.sh writes.
func readEnv(state string) (*Env, error) {
	f, err := os.Open(filepath.Join(state, "cluster.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	env := &Env{
		Host:       vars["DROVER_KUBE_HOST"],
		CAFile:     vars["DROVER_KUBE_CA_FILE"],
		Token:      vars["DROVER_KUBE_TOKEN"],
		Kubeconfig: vars["DROVER_KUBE_KUBECONFIG"],
		Registry:   vars["DROVER_KUBE_REGISTRY"],
		StateDir:   state,
	}
	for k, v := range map[string]string{
		"DROVER_KUBE_HOST": env.Host, "DROVER_KUBE_CA_FILE": env.CAFile, "DROVER_KUBE_TOKEN": env.Token,
		"DROVER_KUBE_KUBECONFIG": env.Kubeconfig, "DROVER_KUBE_REGISTRY": env.Registry,
	} {
		if v == "" {
			return nil, fmt.Errorf("%s: no %s", f.Name(), k)
		}
	}
	return env, nil
}

// missingPrereqs lists what this machine lacks to start the cluster.
func missingPrereqs() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet and containerd run as root; run the tests as root)")
	}
	for _, p := range []string{"/usr/bin/containerd", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap", "/usr/lib/cni/loopback"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, c := range []string{"etcd", "runc", "openssl", "curl", "iptables", "unshare", "flock"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c+" in PATH")
		}
	}
	if _, err := os.Stat(filepath.Join(k8sBinDir(), "kubelet")); err != nil {
		missing = append(missing, fmt.Sprintf("the Kubernetes binaries in %s (scripts/kubecluster/build.sh builds them, about 20 minutes)", k8sBinDir()))
	}
	if _, err := upScript(); err != nil {
		missing = append(missing, err.Error())
	}
	return missing
}

// k8sBinDir is where build.sh puts the binaries.
func k8sBinDir() string {
	// DROVER_CACHE first, as scripts/kubecluster/lib.sh reads it, then
	// drover's cache directory.
	cache := os.Getenv("DROVER_CACHE")
	if cache == "" {
		cache, _ = cachedir.Dir()
	}
	v := os.Getenv("K8S_VERSION")
	if v == "" {
		v = "v1.31.14"
	}
	return filepath.Join(cache, "k8s", v, "bin")
}

// upScript finds scripts/kubecluster/up.sh in the repository the test runs
// in: go test runs a test binary in its package's directory.
func upScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "kubecluster", "up.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/kubecluster/up.sh (not found above the test's directory)")
		}
		dir = parent
	}
}

// runUp runs up.sh for state and returns its output. The daemons it starts
// write to their own logs (not to up.sh's stdout), so Wait returns when
// up.sh exits; WaitDelay guards against one that would not.
func runUp(ctx context.Context, state string) ([]byte, error) {
	script, err := upScript()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "DROVER_KUBE_STATE="+state)
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	return out.Bytes(), err
}
