// Package kubetest gives tests a real single-node Kubernetes cluster: the
// one scripts/kubecluster/up.sh runs on this machine (kube-apiserver,
// kube-controller-manager, kube-scheduler, a kubelet with its own
// containerd, etcd, and a registry the node pulls from). It is imported by
// the _test.go files of other packages (the kubernetes executor's).
//
// # Starting and stopping
//
// Cluster reads $DROVER_KUBE_STATE/cluster.env (default state dir
// /tmp/drover-kube). When the cluster is not up it runs up.sh itself, and
// leaves the cluster running when the test ends: the packages of one
// `go test ./...` share it, and scripts/test.sh tears it down when it
// exits (scripts/kubecluster/down.sh; run it by hand after running tests
// without test.sh). up.sh holds a flock on $STATE/lock while it works, so
// several test binaries calling Cluster at once start one cluster; the
// others wait and find it healthy.
//
// Starting needs root, /usr/bin/containerd, etcd, the CNI plugins and the
// Kubernetes binaries built by scripts/kubecluster/build.sh (about 20
// minutes, too long for a test timeout, so Cluster does not build them).
// What is missing fails the test with a message naming it; the test is not
// skipped.
//
// # Images
//
// The node pulls from a local registry (Env.Registry). PushImage pushes an
// image of the local Docker engine there and returns the reference to put
// in a pod spec.
//
// # Isolation
//
// The cluster is shared by every test of the run: each test works in its
// own namespace (Namespace), deleted when it ends.
package kubetest
