package kubetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LabelTest is on every namespace Namespace creates, set to the test's
// name as a label value allows.
const LabelTest = "drover.io/kubetest"

// namespaceGone is how long the cleanup of Namespace waits for the
// namespace to be deleted.
const namespaceGone = 2 * time.Minute

// Namespace creates a namespace named after the test, unique in the
// cluster (generated suffix), and deletes it when the test ends: its pods
// first, with a 1 s grace period (the tests' sleeping containers ignore
// SIGTERM), then the namespace, waiting until it is gone, so that no test
// leaves work for the node behind.
func Namespace(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: namePrefix(t.Name()),
			Labels:       map[string]string{LabelTest: labelValue(t.Name())},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	t.Cleanup(func() {
		// The test's context is cancelled by now: cleanup has its own.
		ctx, cancel := context.WithTimeout(context.Background(), namespaceGone)
		defer cancel()
		if err := deleteNamespace(ctx, cs, ns.Name); err != nil {
			t.Errorf("kubetest: delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

func deleteNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	grace := int64(1)
	err := cs.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete its pods: %w", err)
	}
	bg := metav1.DeletePropagationBackground
	err = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still there after %v (last get: %v): %w", namespaceGone, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// namePrefix makes a DNS label prefix of a test name: lower case,
// [a-z0-9-], at most 50 characters, ending in "-" (the generated suffix
// follows).
func namePrefix(testName string) string {
	var b strings.Builder
	b.WriteString("t-")
	dash := true
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 48 {
			break
		}
	}
	s := strings.TrimRight(b.String(), "-")
	return s + "-"
}

// labelValue makes a label value of a test name: [A-Za-z0-9._-], at most
// 63 characters, starting and ending alphanumeric.
func labelValue(testName string) string {
	b := []byte(testName)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	s := string(b)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "._-")
}
