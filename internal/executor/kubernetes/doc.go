// Package kubernetes is the kubernetes executor: one pod per job, with a
// build container in the job's image, a helper container in drover's
// helper image and the job's services as further containers, and stage
// scripts run by the attach strategy (started detached in the build
// container, their output read back from a file in a shared emptyDir by
// the helper from a byte offset), so that a job survives its manager.
package kubernetes

import (
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/remotecommand"
)
