package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	kubeexec "github.com/drover-ci/drover/internal/executor/kubernetes"
	"github.com/drover-ci/drover/internal/kubetest"
)

// kube is a test's view of the test cluster: a namespace of its own and
// the test images pushed to the cluster's registry.
type kube struct {
	env                            *kubetest.Env
	cs                             kubernetes.Interface
	ns                             string
	busybox, bash, service, helper string
}

// kubeImagesOnce pushes the test images and drover's helper image once
// per test binary.
var (
	kubeImagesOnce sync.Once
	kubeImages     [4]string
	kubeImagesErr  error
)

// needKube starts (or finds) the test cluster, makes the test's namespace
// and pushes the images its jobs use.
func needKube(t testing.TB) *kube {
	t.Helper()
	needDockerImages(t)
	env := kubetest.Cluster(t)
	cs := env.Client(t)
	kubeImagesOnce.Do(func() {
		cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
		if err != nil {
			kubeImagesErr = err
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		tag, _, err := dockerimage.EnsureHelper(ctx, cli, droverBin, "")
		if err != nil {
			kubeImagesErr = err
			return
		}
		for i, img := range []string{dockerimage.TestImageBusybox, dockerimage.TestImageBash, dockerimage.TestImageService, tag} {
			kubeImages[i] = env.PushImage(t, img)
		}
	})
	if kubeImagesErr != nil {
		t.Fatalf("kubernetes test images: %v", kubeImagesErr)
	}
	return &kube{env: env, cs: cs, ns: kubetest.Namespace(t, cs),
		busybox: kubeImages[0], bash: kubeImages[1], service: kubeImages[2], helper: kubeImages[3]}
}

// config writes a config.toml with one kubernetes runner in the test's
// namespace; runner and kubernetes are further lines of [[runners]] and
// [runners.kubernetes].
func (k *kube) config(t testing.TB, dir, url, token string, concurrent int, runner, kubernetes string) string {
	t.Helper()
	return writeRunnerConfig(t, dir, url, token, concurrent, kubeexec.Name, fmt.Sprintf(`%s
  [runners.kubernetes]
    host = %q
    bearer_token = %q
    ca_file = %q
    namespace = %q
    image = %q
    helper_image = %q
    pull_policy = "if-not-present"
    poll_interval = 1
    cleanup_grace_period_seconds = 1
%s`, runner, k.env.Host, k.env.Token, k.env.CAFile, k.ns, k.busybox, k.helper, kubernetes))
}

// jobObjects lists the pods and secrets of job id in the test's namespace
// (a pod being deleted counts: it is not gone yet).
func (k *kube) jobObjects(t testing.TB, id int64) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kubeexec.LabelJob + "=" + strconv.FormatInt(id, 10)}
	var all []string
	pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, sel)
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	for _, p := range pods.Items {
		all = append(all, "pod "+p.Name)
	}
	secs, err := k.cs.CoreV1().Secrets(k.ns).List(ctx, sel)
	if err != nil {
		t.Fatalf("list secrets: %v", err)
	}
	for _, s := range secs.Items {
		all = append(all, "secret "+s.Name)
	}
	return all
}

func (k *kube) waitNothingLeft(t testing.TB, id int64) {
	t.Helper()
	waitGone(t, fmt.Sprintf("job %d left in namespace %s", id, k.ns), 90*time.Second, func() []string { return k.jobObjects(t, id) })
}

// TestKubernetesExecutor runs jobs in pods of a real single-node cluster
// through a real coordinator and manager: images, exit codes, masked and
// file variables (from the job's Secret, never in the pod spec), bash
// detection, a service reached on localhost and by alias, allowed_images,
// an image that cannot be pulled, an unschedulable pod, and cancel and
// timeout leaving no pod or secret behind.
func TestKubernetesExecutor(t *testing.T) {
	k := needKube(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := k.config(t, dir, c.url, c.runnerToken(t), 6, "", `    poll_timeout = 60
    allowed_images = ["*/drover-test-*", "*/drover-missing-*", "drover-test-*"]
    cpu_request = "10m"`)
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)

	// A second runner whose pods ask for more CPU than the node has.
	big := filepath.Join(dir, "big")
	no := false
	r, err := cl.CreateRunner(context.Background(), client.RunnerSpec{Description: "big", TagList: []string{"big"}, RunUntagged: &no})
	if err != nil {
		t.Fatalf("CreateRunner: %v", err)
	}
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	bigCfg := k.config(t, big, c.url, r.Token, 1, "", `    poll_timeout = 8
    cpu_request = "64"`)
	mb := start(t, big, "run", "--config", bigCfg)
	mb.waitLog("runner manager started", 20*time.Second)

	missing := k.env.Registry + "/drover-missing-image:nope"
	cases := []jobCase{
		{"success", map[string]any{"script": []string{"echo hello from the pod", "echo user=$(id -u) host=$(hostname)",
			"echo disposable=$CI_DISPOSABLE_ENVIRONMENT"}},
			jobWant{status: "success", has: []string{"hello from the pod", "user=0", "host=drover-", "Using Kubernetes executor with image " + k.busybox, "disposable=true"}}},
		{"exit code", map[string]any{"script": []string{"echo before", "exit 3"}},
			jobWant{status: "failed", reason: "script_failure", exit: 3, has: []string{"before", "ERROR: Job failed: exit code 3"}}},
		{"masked and file variables", map[string]any{
			"script": []string{"echo secret=$SECRET_TOKEN", "cat \"$CONF_FILE\"", "echo path=$CONF_FILE",
				"env | grep -q '^SECRET_TOKEN=' && echo env-from-secret"},
			"variables": []map[string]any{
				{"key": "SECRET_TOKEN", "value": "s3cr3t-value-42", "masked": true},
				{"key": "CONF_FILE", "value": "file-content-line", "file": true},
			}},
			jobWant{status: "success", has: []string{"secret=[MASKED]", "file-content-line", "path=/drover-secrets/CONF_FILE", "env-from-secret"}, hasNot: []string{"s3cr3t-value-42"}}},
		{"bash image", map[string]any{"image": k.bash, "script": []string{"echo shell=${BASH_VERSION:+bash}"}},
			jobWant{status: "success", has: []string{"shell=bash"}}},
		{"service on localhost and by alias", map[string]any{
			"services": []any{map[string]any{"name": k.service, "alias": "web"}},
			"script": []string{"for i in $(seq 1 50); do wget -qO- http://localhost:8080/ && break; sleep 0.2; done",
				"wget -qO- http://web:8080/"}},
			jobWant{status: "success", has: []string{"drover service ok\n\x1b[32;1m$ wget -qO- http://web:8080/\x1b[0;m\ndrover service ok\n"}}},
		// CI_DEBUG_SERVICES: the service's output in the job's log. The
		// script waits for the service's port, opened after its line.
		{"service output with CI_DEBUG_SERVICES", map[string]any{
			"variables": []map[string]any{{"key": "CI_DEBUG_SERVICES", "value": "true"}},
			"services": []any{map[string]any{"name": k.busybox, "alias": "talker",
				"entrypoint": []string{"sh", "-c", "echo talker says hi; exec httpd -f -p 9000"}}},
			"script": []string{"for i in $(seq 1 300); do echo | nc localhost 9000 >/dev/null 2>&1 && break; sleep 0.2; done; echo port-open"}},
			jobWant{status: "success", has: []string{"port-open", "-talker] ", "Z talker says hi\x1b[0;m\n"}}},
		{"image not allowed", map[string]any{"image": "forbidden/image:1", "script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "runner_configuration_error", has: []string{"not allowed", "allowed_images"}, hasNot: []string{"must not run\n"}}},
		{"image pull failure", map[string]any{"image": missing, "script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "image_pull_failure", has: []string{"drover-missing-image:nope", "cannot be pulled", "kubelet Failed: "}, hasNot: []string{"must not run\n", "MissingClusterDNS"}}},
		{"unschedulable", map[string]any{"tags": []string{"big"}, "script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "runner_system_failure", has: []string{"cannot be scheduled", "Insufficient cpu", "poll_timeout"}, hasNot: []string{"must not run\n"}}},
	}
	runJobCases(t, c, 180, cases, k.waitNothingLeft)
	testCancelAndTimeout(t, c, 6, 2*time.Minute, k.waitNothingLeft)
}

// TestKubernetesChaosManagerKilled is the seed's scenario: 8 jobs of ~6 s
// printing numbered lines in pods, the manager SIGKILLed three times at
// random moments and restarted on the same file store: every job succeeds
// once with every line exactly once and in order, and no pod or secret is
// left.
func TestKubernetesChaosManagerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	k := needKube(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "5s")
	cl := c.client()
	cfg := k.config(t, dir, c.url, c.runnerToken(t), 8, fileStore(filepath.Join(dir, "store")), "")
	const jobs, lines = 8, 60
	ids := submitChaosJobs(t, c, jobs, lines)
	killRestart(t, dir, cfg, 3, 1500, 3000)
	checkChaosJobs(t, cl, ids, lines, 4*time.Minute)
	for _, id := range ids {
		k.waitNothingLeft(t, id)
	}
}

// TestKubernetesRedisStoreTakeover: two managers with the kubernetes
// executor on one Redis store; the one running a job is killed and the
// other re-attaches to the job's pod and finishes it, every line once.
func TestKubernetesRedisStoreTakeover(t *testing.T) {
	k := needKube(t)
	redisTakeover(t, func(d, url, token, store string) string { return k.config(t, d, url, token, 2, store, "") })
}

// TestKubernetesResumeFaults: with the manager dead, a job's pod is
// deleted (the restarted manager fails it with runner_system_failure),
// and another job's timeout passes (it is failed with
// job_execution_timeout and its pod deleted).
func TestKubernetesResumeFaults(t *testing.T) {
	k := needKube(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--timeout-grace", "1h")
	cl := c.client()
	cfg := k.config(t, dir, c.url, c.runnerToken(t), 2, fileStore(filepath.Join(dir, "store")), "")
	script := []string{`for i in $(seq 1 600); do echo "line $i"; sleep 0.1; done`}
	vanish := submitJSON(t, c, map[string]any{"name": "vanish", "timeout": 600, "script": script})
	late := submitJSON(t, c, map[string]any{"name": "late", "timeout": 12, "script": script})
	m := start(t, dir, "run", "--config", cfg)
	for _, id := range []int64{vanish, late} {
		waitJob(t, cl, id, 2*time.Minute, func(j *client.Job) bool {
			return j.Status == "running" && strings.Contains(trace(t, cl, id), "line 3\n")
		})
	}
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	ctx := context.Background()
	pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kubeexec.LabelJob + "=" + strconv.FormatInt(vanish, 10)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of job %d: %v %v", vanish, pods, err)
	}
	zero := int64(0)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the deleted pod", time.Minute, func() []string {
		var left []string
		for _, o := range k.jobObjects(t, vanish) {
			if strings.HasPrefix(o, "pod ") {
				left = append(left, o)
			}
		}
		return left
	})
	// The late job's timeout passes while nobody watches.
	waitJob(t, cl, late, time.Minute, func(j *client.Job) bool {
		return j.StartedAt != nil && time.Since(*j.StartedAt) > 13*time.Second
	})
	start(t, dir, "run", "--config", cfg)
	got := waitJob(t, cl, vanish, time.Minute, finished)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" {
		t.Errorf("job whose pod vanished = %s %s, want failed runner_system_failure\n%s", got.Status, got.FailureReason, trace(t, cl, vanish))
	}
	got = waitJob(t, cl, late, time.Minute, finished)
	if got.Status != "failed" || got.FailureReason != "job_execution_timeout" {
		t.Errorf("job past its timeout = %s %s, want failed job_execution_timeout\n%s", got.Status, got.FailureReason, trace(t, cl, late))
	}
	k.waitNothingLeft(t, vanish)
	k.waitNothingLeft(t, late)
}

// hostAddress is this host's address on its default route: where pods
// reach the host's listeners (the coordinator, the API server).
func hostAddress(t testing.TB) string {
	t.Helper()
	conn, err := net.Dial("udp", "10.255.255.254:9")
	if err == nil {
		defer conn.Close()
		if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() {
			return a.IP.String()
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 || strings.HasPrefix(i.Name, "veth") || strings.HasPrefix(i.Name, "cni") || strings.HasPrefix(i.Name, "docker") {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	t.Fatal("no address of this host that pods can reach")
	return ""
}

// loadManifests decodes the YAML documents of the files in dir.
func loadManifests(t testing.TB, dir string) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests in %s: %v %v", dir, files, err)
	}
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// TestKubernetesStatefulSetManager is the seed's deployment: the manager
// runs as a pod of the StatefulSet in deploy/kubernetes (RBAC, ConfigMap,
// Secret, a volume per pod); its pod is deleted mid-job, the StatefulSet
// brings it back with the same volume, and the jobs resume: each succeeds
// with every line exactly once, and no job pod is left.
func TestKubernetesStatefulSetManager(t *testing.T) {
	if testing.Short() {
		t.Skip("StatefulSet scenario: -short")
	}
	k := needKube(t)
	ctx := context.Background()
	hostIP := hostAddress(t)
	dir := t.TempDir()
	c := startCoordinatorAt(t, filepath.Join(dir, "coord"), hostIP+":0", "--long-poll-timeout", "3s")
	cl := c.client()
	token := c.runnerToken(t)
	api, err := url.Parse(k.env.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The volume the StatefulSet's claim binds to: a host directory (the
	// test cluster has no storage provisioner).
	pvDir := filepath.Join(dir, "pv")
	if err := os.MkdirAll(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}
	empty := ""
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "drover-e2e-" + k.ns},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              empty,
			ClaimRef:                      &corev1.ObjectReference{Namespace: k.ns, Name: "data-drover-manager-0"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		},
	}
	if _, err := k.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})

	for _, obj := range loadManifests(t, "../deploy/kubernetes") {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = k.ns
			_, err = k.cs.CoreV1().ServiceAccounts(k.ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = k.ns
			_, err = k.cs.RbacV1().Roles(k.ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = k.ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = k.ns
			}
			_, err = k.cs.RbacV1().RoleBindings(k.ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			o.Namespace = k.ns
			toml := o.Data["config.toml"]
			for _, r := range [][2]string{
				{`namespace = "drover"`, fmt.Sprintf("namespace = %q", k.ns)},
				{`image = "busybox:1.36"`, fmt.Sprintf("image = %q\n        pull_policy = \"if-not-present\"\n        poll_interval = 1", k.busybox)},
				{`helper_image = "registry.example.com/drover-helper:latest"`, fmt.Sprintf("helper_image = %q", k.helper)},
			} {
				if !strings.Contains(toml, r[0]) {
					t.Fatalf("config.yaml lacks %q", r[0])
				}
				toml = strings.Replace(toml, r[0], r[1], 1)
			}
			o.Data["config.toml"] = toml
			_, err = k.cs.CoreV1().ConfigMaps(k.ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			o.Namespace = k.ns
			o.StringData = map[string]string{"url": c.url, "token": token}
			_, err = k.cs.CoreV1().Secrets(k.ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.StatefulSet:
			o.Namespace = k.ns
			ctr := &o.Spec.Template.Spec.Containers[0]
			ctr.Image = k.helper
			ctr.ImagePullPolicy = corev1.PullIfNotPresent
			// No kube-proxy in the test cluster: the API server's service
			// address would not answer; its real one does.
			ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: hostIP},
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
			o.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = &empty
			_, err = k.cs.AppsV1().StatefulSets(k.ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected manifest object %T", obj)
		}
		if err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	const lines = 120
	ids := submitChaosJobs(t, c, 2, lines)
	for _, id := range ids {
		waitJob(t, cl, id, 3*time.Minute, func(j *client.Job) bool {
			return j.Status == "running" && strings.Contains(trace(t, cl, id), "line 10\n")
		})
	}
	pods := k.cs.CoreV1().Pods(k.ns)
	old, err := pods.Get(ctx, "drover-manager-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted the manager's pod %s (uid %s) mid-job", old.Name, old.UID)
	for _, id := range ids {
		j := waitJob(t, cl, id, 4*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Errorf("job %d = %s %s\nlog:\n%s", id, j.Status, j.FailureReason, log)
			continue
		}
		checkLines(t, log, j.Name, lines)
	}
	now, err := pods.Get(ctx, "drover-manager-0", metav1.GetOptions{})
	if err != nil || now.UID == old.UID {
		t.Fatalf("the StatefulSet's new pod: %v (uid %v, old %s)", err, now, old.UID)
	}
	// The log comes from the kubelet through the API server, which
	// answers an error now and then while the node is busy: asked again.
	var logs []byte
	for attempt := 1; ; attempt++ {
		logs, err = pods.GetLogs(now.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil || attempt == 30 || ctx.Err() != nil {
			break
		}
		t.Logf("log of pod %s (attempt %d): %v", now.Name, attempt, err)
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "resuming job") {
		t.Errorf("the new manager pod did not resume the jobs; its log:\n%s", logs)
	}
	for _, id := range ids {
		k.waitNothingLeft(t, id)
	}
}
