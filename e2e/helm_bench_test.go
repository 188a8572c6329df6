package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drover-ci/drover/internal/client"
)

// BenchmarkKubernetesManagerImageColdStart measures drover's image as a
// runner manager in the test cluster, the image already on the node: from
// creating the manager's pod (kubernetes executor, in-cluster config, a
// job waiting in the queue) to that job's success, the job's own pod
// included. Baseline in the same run: a pod of the same image running
// drover version, from create to Succeeded. Iterations alternate.
func BenchmarkKubernetesManagerImageColdStart(b *testing.B) {
	k := needKube(b)
	img := k.droverImage(b)
	ctx := context.Background()
	hostIP := hostAddress(b)
	c := startCoordinatorAt(b, filepath.Join(b.TempDir(), "coord"), hostIP+":0", "--long-poll-timeout", "3s")
	cl := c.client()
	token := c.runnerToken(b)
	core := k.cs.CoreV1()
	if _, err := core.ServiceAccounts(k.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "manager"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := k.cs.RbacV1().RoleBindings(k.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "manager", Namespace: k.ns}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	toml := fmt.Sprintf(`concurrent = 1
check_interval = 1
listen_address = ":9252"
[[runners]]
  name = "cold"
  url = %q
  token = %q
  executor = "kubernetes"
  [runners.kubernetes]
    namespace = %q
    image = %q
    helper_image = %q
    pull_policy = "if-not-present"
    poll_interval = 1
    cleanup_grace_period_seconds = 1
`, c.url, token, k.ns, k.busybox, k.helper)
	if _, err := core.ConfigMaps(k.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cold"},
		Data: map[string]string{"config.toml": toml}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	uid := int64(1000)
	pod := func(name string, cmd []string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": name}},
			Spec: corev1.PodSpec{
				RestartPolicy:      corev1.RestartPolicyNever,
				ServiceAccountName: "manager",
				SecurityContext:    &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid},
				Containers: []corev1.Container{{Name: "drover", Image: img, ImagePullPolicy: corev1.PullIfNotPresent, Command: cmd,
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/drover"}, {Name: "data", MountPath: "/var/lib/drover"}}}},
				Volumes: []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cold"}}}},
					{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			},
		}
	}
	zero := int64(0)
	remove := func(name string) {
		if err := core.Pods(k.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatal(err)
		}
		waitGone(b, "pod "+name, time.Minute, func() []string {
			l, err := core.Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: "bench=" + name})
			if err != nil {
				b.Fatal(err)
			}
			return namesOf(l.Items)
		})
	}
	managerRun := []string{"sh", "-c", "cp /etc/drover/config.toml /var/lib/drover/ && exec drover run --config /var/lib/drover/config.toml"}
	var first, bare []time.Duration
	i := 0
	for b.Loop() {
		i++
		j, err := cl.Submit(ctx, client.JobSpec{Name: "cold", Script: []string{"echo first job"}})
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("manager-%d", i)
		t0 := time.Now()
		if _, err := core.Pods(k.ns).Create(ctx, pod(name, managerRun), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if got := waitJob(b, cl, j.ID, 3*time.Minute, finished); got.Status != "success" {
			b.Fatalf("job %d = %s %s\n%s\nmanager: %s", j.ID, got.Status, got.FailureReason, trace(b, cl, j.ID), podLogs(b, k.cs, k.ns, name))
		}
		first = append(first, time.Since(t0))
		b.StopTimer()
		remove(name)
		k.waitNothingLeft(b, j.ID)
		b.StartTimer()

		name = fmt.Sprintf("version-%d", i)
		t0 = time.Now()
		if _, err := core.Pods(k.ns).Create(ctx, pod(name, []string{"drover", "version"}), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitPod(b, k.cs, k.ns, "bench="+name, 3*time.Minute, func(p *corev1.Pod) bool {
			if p.Status.Phase == corev1.PodFailed {
				b.Fatalf("drover version pod failed: %s", podSummary([]corev1.Pod{*p}))
			}
			return p.Status.Phase == corev1.PodSucceeded
		})
		bare = append(bare, time.Since(t0))
		b.StopTimer()
		remove(name)
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(first, 0.5)), "first-job-p50-ms")
	b.ReportMetric(ms(percentile(bare, 0.5)), "version-pod-p50-ms")
}
