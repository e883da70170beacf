package testbed

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A node with NodeConfig.Containerd runs real pods: a containerd of its own
// (Debian's containerd and runc, started by the test, not a system service)
// with its root, state, socket and CNI configuration under the node's
// directory. Each node needs its own runtime: a kubelet removes the pods
// of its runtime that it does not know. The network is loopback only
// (a CNI conflist with the loopback plugin, which the kubelet needs to call
// the node's network ready): pods must use the host network. Nothing is
// pulled: the sandbox ("pause") image is built here and imported, and a
// test imports its own images with Node.ImportImages.

// SandboxImage is the pod sandbox image of nodes that run real pods.
const SandboxImage = "mooring.test/pause:1"

// CNIBinDir is where Debian's containernetworking-plugins installs the CNI
// plugins (the loopback plugin is the one used).
const CNIBinDir = "/usr/lib/cni"

type containerd struct {
	proc                   *process
	dir, root, state, sock string
	containerdBin, ctrBin  string
	shims                  map[int]bool // shim PIDs seen, killed at stop if still alive
}

// containerdConfig is containerd 1.6's configuration (version 2) for one
// node. restrict_oom_score_adj: the test machine lacks CAP_SYS_RESOURCE,
// so containers may not get a lower OOM score than containerd's own. The
// plugins that would touch fixed paths or need other file systems are off;
// runc keeps its state under dir too. (Only the shims' sockets go to a fixed
// place, /run/containerd/s, named by a hash of the containerd socket.)
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
`

// loopbackConflist is the only network: the pod's loopback interface.
const loopbackConflist = `{
  "cniVersion": "1.0.0",
  "name": "mooring-testbed-loopback",
  "plugins": [{"type": "loopback"}]
}
`

// startContainerd starts a containerd with its state under dir, imports
// the sandbox image and returns once it serves the CRI.
func startContainerd(ctx context.Context, name, dir, logPath string) (c *containerd, err error) {
	c = &containerd{dir: dir, root: filepath.Join(dir, "root"), state: filepath.Join(dir, "state"),
		sock: filepath.Join(dir, "containerd.sock"), shims: map[int]bool{}}
	for _, bin := range []struct {
		name string
		path *string
	}{{"containerd", &c.containerdBin}, {"ctr", &c.ctrBin}, {"runc", nil}, {"containerd-shim-runc-v2", nil}} {
		p, err := exec.LookPath(bin.name)
		if err != nil {
			return nil, fmt.Errorf("testbed: %s not found on PATH; install Debian's containerd and runc with hack/install-deps.sh", bin.name)
		}
		if bin.path != nil {
			*bin.path = p
		}
	}
	if _, err := os.Stat(filepath.Join(CNIBinDir, "loopback")); err != nil {
		return nil, fmt.Errorf("testbed: the CNI loopback plugin is missing (%v); install Debian's containernetworking-plugins with hack/install-deps.sh", err)
	}
	cniConf := filepath.Join(dir, "cni")
	for _, d := range []string{c.root, c.state, cniConf} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-loopback.conflist"), []byte(loopbackConflist), 0o644); err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, containerdConfig, c.root, c.state, c.sock, c.sock+".ttrpc",
		SandboxImage, CNIBinDir, cniConf, filepath.Join(dir, "runc")), 0o600); err != nil {
		return nil, err
	}
	if c.proc, err = startProcess(name, logPath, c.containerdBin, "--config", config); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	if err := waitFor(startTimeout, 100*time.Millisecond, name+" socket", func() (bool, error) {
		if done, _ := c.proc.exited(); done {
			return false, errExited
		}
		_, err := os.Stat(c.sock)
		return err == nil, nil
	}); err != nil {
		return c, c.proc.failure(err)
	}
	pause, err := buildSandboxImage()
	if err != nil {
		return c, err
	}
	return c, c.importImages(ctx, pause)
}

// Endpoint is the CRI endpoint for the kubelet.
func (c *containerd) Endpoint() string { return "unix://" + c.sock }

// importImages imports image archives (OCI layouts or docker save tars)
// into the k8s.io namespace, where the kubelet's pods find them.
func (c *containerd) importImages(ctx context.Context, tars ...string) error {
	for _, t := range tars {
		cmd := exec.CommandContext(ctx, c.ctrBin, "--address", c.sock, "--namespace", "k8s.io", "images", "import", t)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images import %s: %v\n%s", t, err, out)
		}
	}
	return nil
}

// taskDir is containerd's state directory of a container's task.
func (c *containerd) taskDir(containerID string) string {
	return filepath.Join(c.state, "io.containerd.runtime.v2.task", "k8s.io", containerID)
}

// recordShims notes the PID of every shim containerd has started so far
// (each task's shim.pid), so that stop can end one that outlives it.
func (c *containerd) recordShims() {
	files, _ := filepath.Glob(filepath.Join(c.state, "io.containerd.runtime.v2.task", "*", "*", "shim.pid"))
	for _, f := range files {
		if pid, err := readPID(f); err == nil {
			c.shims[pid] = true
		}
	}
}

// stop removes every pod through the CRI (which stops its containers, ends
// their shims and unmounts their root file systems), stops containerd,
// then kills any shim it recorded that is still alive (checked by its
// command line, so a reused PID is left alone). The caller has stopped the
// kubelet, which would start the pods again.
func (c *containerd) stop() error {
	if c.proc == nil {
		return nil
	}
	var errs []error
	c.recordShims()
	if done, _ := c.proc.exited(); !done {
		errs = append(errs, c.removePods())
	}
	c.recordShims()
	errs = append(errs, stopAll([]*process{c.proc}, nil))
	for pid := range c.shims {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte("containerd-shim")) || !bytes.Contains(cmdline, []byte(c.sock)) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.proc = nil
	return errors.Join(errs...)
}

// removePods stops and removes every pod sandbox of the runtime.
func (c *containerd) removePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod %s: %w", s.Metadata.GetName(), err))
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s: %w", s.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// buildSandboxImage returns the sandbox image (SandboxImage, a docker-save
// tar of test/testbed/pause), built once into the cache (CacheDir) and
// kept there under a key of its source, Go version and platform.
func buildSandboxImage() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "pause", "main.go")
	code, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(code, runtime.Version()+" "+runtime.GOARCH...))
	out := filepath.Join(CacheDir(), "testbed", "pause-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	work, err := os.MkdirTemp("", "mooring-pause-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./pause")
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the sandbox image's pause: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = runtime.GOARCH, "linux"
	cfg.Config.Entrypoint = []string{"/pause"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	ref, err := name.ParseReference(SandboxImage)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	// Written aside and renamed: concurrent tests never read half a file.
	tmp := filepath.Join(work, "pause.tar")
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return "", err
	}
	data, err = os.ReadFile(tmp)
	if err != nil {
		return "", err
	}
	part := out + ".part-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(part, data, 0o644); err != nil {
		return "", err
	}
	return out, os.Rename(part, out)
}
