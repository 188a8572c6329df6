package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// chartDir is drover's Helm chart.
const chartDir = "../deploy/helm/drover"

// helmBin finds the helm CLI scripts/test.sh installs into drover's cache
// (else one on PATH), or skips the test.
func helmBin(t testing.TB) string {
	t.Helper()
	cache, _ := cachedir.Dir() // without a home, no cache: PATH then
	if p := filepath.Join(cache, "bin", "helm"); cache != "" && isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	t.Skip("no helm in " + filepath.Join(cache, "bin") + " nor on PATH: scripts/test.sh installs it (go install helm.sh/helm/v3/cmd/helm@v3.22.0)")
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// helm runs the helm CLI with its own config, cache and data directories
// (nothing written to $HOME) and the kubeconfig kubeconfig ("" for none),
// and returns its standard output; a failure is returned with its
// standard error.
func helm(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(context.Background(), helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// object is one rendered manifest, as yaml.v3 decodes it.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) name() string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// get walks o by map keys and list indexes ("spec", "template", 0, ...).
func (o object) get(path ...any) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

// parseManifests decodes the YAML documents helm template prints, keyed
// "Kind/name".
func parseManifests(t testing.TB, out string) map[string]object {
	t.Helper()
	objs := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		// Into a plain map: yaml.v3 would make every nested mapping an
		// object too.
		var m map[string]any
		err := dec.Decode(&m)
		o := object(m)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decode helm template's output: %v\n%s", err, out)
		}
		if o == nil {
			continue
		}
		key := o.kind() + "/" + o.name()
		if _, dup := objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		objs[key] = o
	}
}

// envOf returns the env entries of the first container of a workload, by
// name.
func envOf(o object) map[string]map[string]any {
	env := map[string]map[string]any{}
	list, _ := o.get("spec", "template", "spec", "containers", 0, "env").([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		env[name] = m
	}
	return env
}

func secretRef(e map[string]any) string {
	if e == nil {
		return ""
	}
	o := object(e)
	n, _ := o.get("valueFrom", "secretKeyRef", "name").(string)
	k, _ := o.get("valueFrom", "secretKeyRef", "key").(string)
	return n + "/" + k
}

// TestHelmTemplate renders the chart with helm template and checks which
// objects each set of values makes and how they refer to their Secrets;
// helm lint passes on the chart.
func TestHelmTemplate(t *testing.T) {
	helmBin(t)
	t.Parallel()
	if out, err := helm(t, "", "lint", "--strict", chartDir,
		"--set", "runnerToken=glrt-x,coordinatorURL=https://ci.example.com,runners.kubernetes.helper_image=h:1"); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	base := []string{"runners.kubernetes.helper_image=reg.example.com/drover-helper:abc"}
	manager := []string{"ConfigMap/r-drover", "ServiceAccount/r-drover", "Role/r-drover", "RoleBinding/r-drover", "StatefulSet/r-drover", "Service/r-drover"}
	coordinator := []string{"Deployment/r-drover-coordinator", "Service/r-drover-coordinator", "Secret/r-drover-coordinator"}
	cases := []struct {
		name    string
		set     []string
		want    []string // exactly these objects
		wantErr string
		check   func(t *testing.T, objs map[string]object)
	}{
		{name: "runner token and external coordinator",
			set:  []string{"runnerToken=glrt-abc", "coordinatorURL=https://gitlab.example.com", "concurrent=4"},
			want: append([]string{"Secret/r-drover-runner"}, manager...),
			check: func(t *testing.T, objs map[string]object) {
				ss := objs["StatefulSet/r-drover"]
				env := envOf(ss)
				if got := secretRef(env["DROVER_TOKEN"]); got != "r-drover-runner/runner-token" {
					t.Errorf("DROVER_TOKEN from %q", got)
				}
				if env["DROVER_URL"]["value"] != "https://gitlab.example.com" || env["DROVER_ADMIN_TOKEN"] != nil {
					t.Errorf("manager env: %v", env)
				}
				toml, _ := objs["ConfigMap/r-drover"].get("data", "config.toml").(string)
				for _, want := range []string{"concurrent = 4\n", `helper_image = "reg.example.com/drover-helper:abc"`,
					`namespace = "ns"`, `path = "/var/lib/drover/store"`, `listen_address = ":9252"`} {
					if !strings.Contains(toml, want) {
						t.Errorf("config.toml lacks %q:\n%s", want, toml)
					}
				}
				if ss.get("spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted") != "Delete" {
					t.Errorf("the managers' volumes outlive the release: %v", ss.get("spec", "persistentVolumeClaimRetentionPolicy"))
				}
				if p, _ := ss.get("spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet", "path").(string); p != "/health/ready" {
					t.Errorf("readiness probe path %q", p)
				}
			}},
		{name: "existing runner secret",
			set:  []string{"runners.secret=my-token", "coordinatorURL=https://gitlab.example.com"},
			want: manager,
			check: func(t *testing.T, objs map[string]object) {
				if got := secretRef(envOf(objs["StatefulSet/r-drover"])["DROVER_TOKEN"]); got != "my-token/runner-token" {
					t.Errorf("DROVER_TOKEN from %q", got)
				}
			}},
		{name: "coordinator with SQLite on a volume",
			set:  []string{"coordinator.enabled=true"},
			want: append(append([]string{"PersistentVolumeClaim/r-drover-coordinator"}, manager...), coordinator...),
			check: func(t *testing.T, objs map[string]object) {
				env := envOf(objs["StatefulSet/r-drover"])
				if got := secretRef(env["DROVER_ADMIN_TOKEN"]); got != "r-drover-coordinator/admin-token" || env["DROVER_TOKEN"] != nil {
					t.Errorf("manager env: %v", env)
				}
				if env["DROVER_URL"]["value"] != "http://r-drover-coordinator.ns.svc:8080" {
					t.Errorf("DROVER_URL = %v", env["DROVER_URL"])
				}
				cenv := envOf(objs["Deployment/r-drover-coordinator"])
				if cenv["DROVER_DATABASE_URL"] != nil || secretRef(cenv["DROVER_SECRET_KEY"]) != "r-drover-coordinator/secret-key" {
					t.Errorf("coordinator env: %v", cenv)
				}
				if c := objs["Deployment/r-drover-coordinator"].get("spec", "template", "spec", "volumes", 0, "persistentVolumeClaim", "claimName"); c != "r-drover-coordinator" {
					t.Errorf("coordinator volume claim %v", c)
				}
			}},
		{name: "coordinator with PostgreSQL by URL",
			set:  []string{"coordinator.enabled=true", "coordinator.databaseURL=postgres://u:p@db:5432/drover", "coordinator.persistence.enabled=false", "runnerToken=glrt-abc"},
			want: append(append([]string{"Secret/r-drover-database", "Secret/r-drover-runner"}, manager...), coordinator...),
			check: func(t *testing.T, objs map[string]object) {
				if got := secretRef(envOf(objs["Deployment/r-drover-coordinator"])["DROVER_DATABASE_URL"]); got != "r-drover-database/database-url" {
					t.Errorf("DROVER_DATABASE_URL from %q", got)
				}
				if d, _ := objs["Secret/r-drover-database"].get("data", "database-url").(string); d == "" || strings.Contains(d, "postgres://") {
					t.Errorf("database-url in the Secret = %q, want base64", d)
				}
			}},
		{name: "coordinator with an existing database secret",
			set:  []string{"coordinator.enabled=true", "coordinator.databaseSecret=pg", "coordinator.existingSecret=coord"},
			want: append([]string{"PersistentVolumeClaim/r-drover-coordinator", "Deployment/r-drover-coordinator", "Service/r-drover-coordinator"}, manager...),
			check: func(t *testing.T, objs map[string]object) {
				cenv := envOf(objs["Deployment/r-drover-coordinator"])
				if secretRef(cenv["DROVER_DATABASE_URL"]) != "pg/database-url" || secretRef(cenv["DROVER_ADMIN_TOKEN"]) != "coord/admin-token" {
					t.Errorf("coordinator env: %v", cenv)
				}
			}},
		{name: "service monitor on",
			set:  []string{"runnerToken=glrt-abc", "coordinatorURL=https://gitlab.example.com", "metrics.serviceMonitor.enabled=true"},
			want: append([]string{"Secret/r-drover-runner", "ServiceMonitor/r-drover"}, manager...),
			check: func(t *testing.T, objs map[string]object) {
				sm := objs["ServiceMonitor/r-drover"]
				if sm["apiVersion"] != "monitoring.coreos.com/v1" || sm.get("spec", "endpoints", 0, "port") != "metrics" {
					t.Errorf("ServiceMonitor: %v", sm)
				}
			}},
		{name: "no persistence",
			set:  []string{"runnerToken=glrt-abc", "coordinatorURL=https://gitlab.example.com", "persistence.enabled=false"},
			want: append([]string{"Secret/r-drover-runner"}, manager...),
			check: func(t *testing.T, objs map[string]object) {
				ss := objs["StatefulSet/r-drover"]
				if ss.get("spec", "volumeClaimTemplates") != nil || ss.get("spec", "template", "spec", "volumes", 1, "emptyDir") == nil {
					t.Errorf("StatefulSet volumes: %v %v", ss.get("spec", "volumeClaimTemplates"), ss.get("spec", "template", "spec", "volumes"))
				}
				if toml, _ := objs["ConfigMap/r-drover"].get("data", "config.toml").(string); strings.Contains(toml, "runners.store") {
					t.Errorf("a job store without a volume:\n%s", toml)
				}
			}},
		{name: "no token nor coordinator", set: []string{"coordinatorURL=https://gitlab.example.com"},
			wantErr: "runnerToken or runners.secret is required"},
		{name: "no helper image", set: []string{"runnerToken=glrt-abc", "coordinatorURL=https://x", "runners.kubernetes.helper_image="},
			wantErr: "runners.kubernetes.helper_image is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"template", "r", chartDir, "--namespace", "ns", "--kube-version", "1.31.0"}
			for _, s := range append(append([]string{}, base...), tc.set...) {
				args = append(args, "--set", s)
			}
			out, err := helm(t, "", args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("helm template = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			objs := parseManifests(t, out)
			var got []string
			for k := range objs {
				got = append(got, k)
			}
			if !sameSet(got, tc.want) {
				t.Errorf("objects = %v\nwant %v", got, tc.want)
			}
			for k, o := range objs {
				if l := o.get("metadata", "labels", "app.kubernetes.io/instance"); l != "r" {
					t.Errorf("%s lacks the release label: %v", k, o.get("metadata", "labels"))
				}
			}
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		if m[s] == 0 {
			return false
		}
		m[s]--
	}
	return true
}

// droverImage builds drover's image of the test's drover binary and
// pushes it to the test cluster's registry; it returns the reference.
func (k *kube) droverImage(t testing.TB) string {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	helperTag, err := dockerimage.HelperTag(droverBin)
	if err != nil {
		t.Fatal(err)
	}
	tag := "drover-e2e:" + strings.TrimPrefix(helperTag, "drover-helper:")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := dockerimage.EnsureDrover(ctx, cli, droverBin, tag, "e2e"); err != nil {
		t.Fatalf("drover's image: %v", err)
	}
	return k.env.PushImage(t, tag)
}

// hostPathPV makes a PersistentVolume on a directory of the host, bound
// in advance to the claim ns/claim (the test cluster has no storage
// provisioner), deleted at cleanup.
func (k *kube) hostPathPV(t testing.TB, claim string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), claim)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "drover-e2e-" + k.ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: k.ns, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := k.cs.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPod watches the pods of ns matching selector until ok holds for one
// of them, and returns it; it fails the test after d (a safety net: the
// wait ends on the watch event).
func waitPod(t testing.TB, cs kubernetes.Interface, ns, selector string, d time.Duration, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	pods := cs.CoreV1().Pods(ns)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatalf("pods %s: %v", selector, err)
		}
		for i := range list.Items {
			if ok(&list.Items[i]) {
				return &list.Items[i]
			}
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("watch pods %s: %v", selector, err)
		}
		for ev := range w.ResultChan() {
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type != watch.Deleted && ok(p) {
				w.Stop()
				return p
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			var logs strings.Builder
			for _, p := range list.Items {
				fmt.Fprintf(&logs, "log of %s:\n%s\n", p.Name, podLogs(t, cs, ns, p.Name))
			}
			t.Fatalf("pods %s in %s: condition not met within %v; last list: %s\nevents:\n%s%s", selector, ns, d, podSummary(list.Items), nsEvents(cs, ns), logs.String())
		}
	}
}

// nsEvents lists the events of namespace ns, for a failure's message.
func nsEvents(cs kubernetes.Interface, ns string) string {
	l, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range l.Items {
		fmt.Fprintf(&b, "%s %s: %s %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

func podSummary(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "%s %s ready=%v;", p.Name, p.Status.Phase, podReady(&p))
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s restarts=%d %+v", c.Name, c.RestartCount, c.State)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// namesOf returns the names of a list's items.
func namesOf[T any, P interface {
	*T
	GetName() string
}](items []T) []string {
	var s []string
	for i := range items {
		s = append(s, P(&items[i]).GetName())
	}
	return s
}

// releaseObjects lists what carries the label of release rel in ns, as
// "Kind/name".
func (k *kube) releaseObjects(t testing.TB, rel string) []string {
	t.Helper()
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel}
	core, apps, rbac := k.cs.CoreV1(), k.cs.AppsV1(), k.cs.RbacV1()
	var left []string
	add := func(kind string, names []string, err error) {
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		for _, n := range names {
			left = append(left, kind+"/"+n)
		}
	}
	if l, err := core.Pods(k.ns).List(ctx, opts); err != nil {
		add("Pod", nil, err)
	} else {
		add("Pod", namesOf(l.Items), nil)
	}
	if l, err := core.Secrets(k.ns).List(ctx, opts); err != nil {
		add("Secret", nil, err)
	} else {
		add("Secret", namesOf(l.Items), nil)
	}
	if l, err := core.ConfigMaps(k.ns).List(ctx, opts); err != nil {
		add("ConfigMap", nil, err)
	} else {
		add("ConfigMap", namesOf(l.Items), nil)
	}
	if l, err := core.Services(k.ns).List(ctx, opts); err != nil {
		add("Service", nil, err)
	} else {
		add("Service", namesOf(l.Items), nil)
	}
	if l, err := core.ServiceAccounts(k.ns).List(ctx, opts); err != nil {
		add("ServiceAccount", nil, err)
	} else {
		add("ServiceAccount", namesOf(l.Items), nil)
	}
	if l, err := core.PersistentVolumeClaims(k.ns).List(ctx, opts); err != nil {
		add("PersistentVolumeClaim", nil, err)
	} else {
		add("PersistentVolumeClaim", namesOf(l.Items), nil)
	}
	if l, err := apps.StatefulSets(k.ns).List(ctx, opts); err != nil {
		add("StatefulSet", nil, err)
	} else {
		add("StatefulSet", namesOf(l.Items), nil)
	}
	if l, err := apps.Deployments(k.ns).List(ctx, opts); err != nil {
		add("Deployment", nil, err)
	} else {
		add("Deployment", namesOf(l.Items), nil)
	}
	if l, err := rbac.Roles(k.ns).List(ctx, opts); err != nil {
		add("Role", nil, err)
	} else {
		add("Role", namesOf(l.Items), nil)
	}
	if l, err := rbac.RoleBindings(k.ns).List(ctx, opts); err != nil {
		add("RoleBinding", nil, err)
	} else {
		add("RoleBinding", namesOf(l.Items), nil)
	}
	return left
}

// TestHelmChart installs the chart into the test cluster with helm: the
// coordinator (SQLite on a volume, its port on the node) and a manager
// with the kubernetes executor; a job runs through them. An upgrade that
// changes config.toml restarts the manager (checksum annotation) and a
// job sees the new config; the coordinator and its tokens are kept.
// Uninstalling leaves nothing of the release in the namespace.
func TestHelmChart(t *testing.T) {
	helmBin(t)
	k := needKube(t)
	start := time.Now()
	img := k.droverImage(t)
	repo, tag, _ := strings.Cut(img[len(k.env.Registry)+1:], ":")
	repo = k.env.Registry + "/" + repo
	const rel = "drover"
	k.hostPathPV(t, "data-drover-0")
	k.hostPathPV(t, "drover-coordinator")
	// No kube-proxy nor cluster DNS in the test cluster: the managers and
	// the test reach the coordinator's Service through serviceProxy.
	coordURL := "http://" + serviceProxy(t, k.cs, k.ns, rel+"-coordinator", hostAddress(t))
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`image:
  repository: %q
  tag: %q
coordinatorURL: %q
concurrent: 2
checkInterval: 1
persistence:
  storageClass: "-"
runners:
  kubernetes:
    image: %q
    helper_image: %q
    pull_policy: if-not-present
    poll_interval: 1
    cleanup_grace_period_seconds: 1
coordinator:
  enabled: true
  extraArgs: ["--long-poll-timeout=3s"]
  persistence:
    storageClass: "-"
`, repo, tag, coordURL, k.busybox, k.helper)), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := k.env.Kubeconfig
	if out, err := helm(t, kc, "install", rel, chartDir, "--namespace", k.ns, "--values", values); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_, _ = helm(t, kc, "uninstall", rel, "--namespace", k.ns, "--wait")
		}
	})
	sel := "app.kubernetes.io/instance=" + rel
	waitPod(t, k.cs, k.ns, sel+",app.kubernetes.io/component=coordinator", 3*time.Minute, podReady)
	mgr := waitPod(t, k.cs, k.ns, sel+",app.kubernetes.io/component=manager", 3*time.Minute, podReady)
	t.Logf("installed and ready in %s (image build and push included)", time.Since(start).Round(100*time.Millisecond))

	sec, err := k.cs.CoreV1().Secrets(k.ns).Get(context.Background(), rel+"-coordinator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator{url: coordURL, token: string(sec.Data["admin-token"])}
	cl := c.client()
	runJob := func(name string, want ...string) {
		t.Helper()
		id := submitJSON(t, c, map[string]any{"name": name, "timeout": 120,
			"script": []string{"echo hello from the chart", "echo mark=${DROVER_CHART_MARK:-none}"}})
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %s = %s %s\nlog:\n%s\nmanager: %s", name, j.Status, j.FailureReason, log, podLogs(t, k.cs, k.ns, mgr.Name))
		}
		for _, w := range append([]string{"hello from the chart", "Using Kubernetes executor"}, want...) {
			if !strings.Contains(log, w) {
				t.Errorf("job %s: log lacks %q:\n%s", name, w, log)
			}
		}
	}
	runJob("first", "mark=none")

	// An upgrade with a changed value: config.toml changes, the manager's
	// pod is replaced, the coordinator and its tokens stay.
	coordPod := waitPod(t, k.cs, k.ns, sel+",app.kubernetes.io/component=coordinator", time.Minute, podReady)
	if out, err := helm(t, kc, "upgrade", rel, chartDir, "--namespace", k.ns, "--reuse-values",
		"--set", "concurrent=3", "--set-string", `runners.config=environment = ["DROVER_CHART_MARK=upgraded"]`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cm, err := k.cs.CoreV1().ConfigMaps(k.ns).Get(context.Background(), rel, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if toml := cm.Data["config.toml"]; !strings.Contains(toml, "concurrent = 3\n") || !strings.Contains(toml, "DROVER_CHART_MARK=upgraded") {
		t.Errorf("config.toml after the upgrade:\n%s", toml)
	}
	newMgr := waitPod(t, k.cs, k.ns, sel+",app.kubernetes.io/component=manager", 3*time.Minute, func(p *corev1.Pod) bool {
		return p.UID != mgr.UID && podReady(p)
	})
	if newMgr.Annotations["checksum/config"] == mgr.Annotations["checksum/config"] {
		t.Errorf("the manager's pod was replaced but its config checksum is the same: %s", newMgr.Annotations["checksum/config"])
	}
	mgr = newMgr
	sec2, err := k.cs.CoreV1().Secrets(k.ns).Get(context.Background(), rel+"-coordinator", metav1.GetOptions{})
	if err != nil || !bytes.Equal(sec2.Data["admin-token"], sec.Data["admin-token"]) || !bytes.Equal(sec2.Data["secret-key"], sec.Data["secret-key"]) {
		t.Errorf("the upgrade changed the coordinator's tokens (%v)", err)
	}
	if p, err := k.cs.CoreV1().Pods(k.ns).Get(context.Background(), coordPod.Name, metav1.GetOptions{}); err != nil || p.UID != coordPod.UID {
		t.Errorf("the upgrade replaced the coordinator's pod (%v)", err)
	}
	runJob("after upgrade", "mark=upgraded")
	logs := podLogs(t, k.cs, k.ns, mgr.Name)
	if strings.Contains(logs, "creating this manager's runner") {
		t.Errorf("the restarted manager made another runner instead of keeping its token:\n%s", logs)
	}

	if out, err := helm(t, kc, "uninstall", rel, "--namespace", k.ns, "--wait"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uninstalled = true
	waitGone(t, "release objects left after helm uninstall", 2*time.Minute, func() []string { return k.releaseObjects(t, rel) })
	waitGone(t, "pods left after helm uninstall", 2*time.Minute, func() []string {
		l, err := k.cs.CoreV1().Pods(k.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return namesOf(l.Items)
	})
	t.Logf("install, two jobs, upgrade, uninstall: %s", time.Since(start).Round(100*time.Millisecond))
}

// serviceProxy is a stand-in for kube-proxy, which the test cluster does
// not run: it listens on ip (an address of this host that pods reach) and
// forwards each connection to a ready endpoint of Service ns/svc, looked
// up when the connection comes. It returns its host:port.
func serviceProxy(t testing.TB, cs kubernetes.Interface, ns, svc, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	target := func() (string, error) {
		ep, err := cs.CoreV1().Endpoints(ns).Get(context.Background(), svc, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, ss := range ep.Subsets {
			if len(ss.Addresses) > 0 && len(ss.Ports) > 0 {
				return net.JoinHostPort(ss.Addresses[0].IP, strconv.Itoa(int(ss.Ports[0].Port))), nil
			}
		}
		return "", fmt.Errorf("service %s/%s has no ready endpoint", ns, svc)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				addr, err := target()
				if err != nil {
					return
				}
				up, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

// podLogs returns a pod's log, or what went wrong getting it.
func podLogs(t testing.TB, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return fmt.Sprintf("(log of %s: %v)", name, err)
	}
	return string(b)
}
