package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Sweep deletes the pods and secrets labelled with systemID, in the
// namespaces of every kubernetes runner, whose job keep does not report
// as one that will be resumed (executor.Sweeper).
func (p *Provider) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	if p.o.Configs == nil {
		return nil, nil
	}
	sel := labels.Set{LabelSystemID: labelValue(systemID), LabelManaged: "1"}.AsSelector().String()
	var removed []string
	var errs []error
	seen := map[string]bool{}
	for _, c := range p.o.Configs() {
		cl, err := p.client(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := cl.cfg.Host + " " + c.Namespace
		if seen[key] {
			continue
		}
		seen[key] = true
		r, err := deleteLabelled(ctx, cl.cs, c.Namespace, sel, keep, metav1.DeleteOptions{GracePeriodSeconds: c.CleanupGrace})
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// deleteLabelled deletes the pods and secrets of namespace ns matching the
// label selector sel whose job keep does not keep (keep nil: all), and
// returns what it deleted.
func deleteLabelled(ctx context.Context, cs kubernetes.Interface, ns, sel string, keep func(int64) bool, opts metav1.DeleteOptions) ([]string, error) {
	kept := func(l map[string]string) bool {
		if keep == nil {
			return false
		}
		id, err := strconv.ParseInt(l[LabelJob], 10, 64)
		return err == nil && keep(id)
	}
	var removed []string
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list job pods in namespace %s: %w", ns, err)
	}
	var errs []error
	for _, p := range pods.Items {
		if kept(p.Labels) || p.DeletionTimestamp != nil {
			continue
		}
		if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, opts); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete pod %s/%s: %w", ns, p.Name, err))
			continue
		}
		removed = append(removed, fmt.Sprintf("pod %s/%s (job %s)", ns, p.Name, p.Labels[LabelJob]))
	}
	secs, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("list job secrets in namespace %s: %w", ns, err))...)
	}
	for _, s := range secs.Items {
		if kept(s.Labels) || s.DeletionTimestamp != nil {
			continue
		}
		if err := cs.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete secret %s/%s: %w", ns, s.Name, err))
			continue
		}
		removed = append(removed, fmt.Sprintf("secret %s/%s (job %s)", ns, s.Name, s.Labels[LabelJob]))
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}
