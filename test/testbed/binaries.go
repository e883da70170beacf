package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// KubeVersion is the Kubernetes release the test bed runs.
const KubeVersion = "v1.36.3"

// Binaries are the paths of the programs the test bed runs.
type Binaries struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kubelet               string
	// KubeScheduler and Kubectl are found when present: only control
	// planes with Config.Scheduler run kube-scheduler, and only tests that
	// apply manifests as users do run kubectl.
	KubeScheduler string
	Kubectl       string
}

// CacheDir is where hack/build-k8s.sh keeps what it builds:
// $MOORING_CACHE, else $XDG_CACHE_HOME/mooring, else ~/.cache/mooring.
func CacheDir() string {
	if d := os.Getenv("MOORING_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "mooring")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "mooring")
}

// FindBinaries locates the Kubernetes binaries in $MOORING_KUBE_BIN or the
// build cache, and etcd in $MOORING_ETCD or on PATH.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv("MOORING_KUBE_BIN")
	if dir == "" {
		dir = filepath.Join(CacheDir(), "kubernetes", KubeVersion, "bin")
	}
	b := Binaries{
		KubeAPIServer:         filepath.Join(dir, "kube-apiserver"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kubelet:               filepath.Join(dir, "kubelet"),
	}
	for _, p := range []string{b.KubeAPIServer, b.KubeControllerManager, b.Kubelet} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return b, fmt.Errorf("testbed: %s is missing; build it with `make kube-bins` (hack/build-k8s.sh)", p)
		}
	}
	if p := filepath.Join(dir, "kube-scheduler"); isExecutable(p) {
		b.KubeScheduler = p
	}
	if p := filepath.Join(dir, "kubectl"); isExecutable(p) {
		b.Kubectl = p
	}
	b.Etcd = os.Getenv("MOORING_ETCD")
	if b.Etcd == "" {
		p, err := exec.LookPath("etcd")
		if err != nil {
			return b, fmt.Errorf("testbed: etcd not found on PATH; install it with hack/install-deps.sh")
		}
		b.Etcd = p
	}
	return b, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
