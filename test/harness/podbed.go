package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/internal/pki"
	"github.com/mooring-dev/mooring/test/testbed"
)

// The pod bed: control-plane machines whose kubelets run real pods (a
// containerd of their own each, testbed.NodeConfig.Containerd), so that
// mooring is installed as users install it, from its chart or overlays,
// and runs from its own images.

// ControlPlaneLabel and ControlPlaneTaint mark control-plane Nodes, as
// kubeadm marks them.
const (
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
	ControlPlaneTaint = ControlPlaneLabel
)

// PodNode is a control-plane machine: a local cloud instance whose kubelet
// serves on the instance's address and runs real pods.
type PodNode struct {
	*testbed.Node
	Instance *api.Instance
}

// StartControlPlaneNodes starts n control-plane machines, cp-1 ... cp-n,
// as instances of the local cloud in cluster, with images imported into
// their runtimes. Their kubelets hold client certificates the cluster CA
// issued directly (as kubeadm gives control-plane kubelets theirs: no
// join); each Node gets kubeadm's control-plane label and taint and its
// instance's address, as the kubelet's --node-ip would give it (the test
// bed's addresses are loopback ones, which --node-ip refuses): a pod that
// reads status.hostIP can start before any cloud controller runs. The
// cluster stops them.
func StartControlPlaneNodes(ctx context.Context, c *testbed.Cluster, lc *LocalCloud, cluster string, n int, images ...string) ([]*PodNode, error) {
	var out []*PodNode
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("cp-%d", i)
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: cluster})
		if err != nil {
			return nil, err
		}
		addr := instanceAddress(in, "InternalIP")
		kp, err := c.CA.Issue(pki.Request{CommonName: "system:node:" + name, Organizations: []string{"system:nodes"}, Profile: pki.ProfileClient})
		if err != nil {
			return nil, err
		}
		start := time.Now()
		node, err := c.AddNodeConfig(ctx, testbed.NodeConfig{Name: name, Address: addr, Containerd: true,
			ClientCertPEM: kp.CertPEM, ClientKeyPEM: kp.KeyPEM})
		if err != nil {
			return nil, err
		}
		started := time.Since(start)
		if err := node.ImportImages(ctx, images...); err != nil {
			return nil, err
		}
		imported := time.Since(start) - started
		if err := markControlPlane(ctx, c, name, addr); err != nil {
			return nil, err
		}
		c.Logf("control-plane node %s (%s): containerd and kubelet in %v, %d images imported in %v", name, addr,
			started.Round(time.Millisecond), len(images), imported.Round(time.Millisecond))
		out = append(out, &PodNode{Node: node, Instance: in})
	}
	return out, nil
}

func instanceAddress(in *api.Instance, typ string) string {
	for _, a := range in.Addresses {
		if string(a.Type) == typ {
			return a.Address
		}
	}
	return ""
}

// markControlPlane waits for the Node to register, then labels and taints
// it as kubeadm does a control-plane node, and gives it its address.
func markControlPlane(ctx context.Context, c *testbed.Cluster, name, addr string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return fmt.Errorf("node %s did not register: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{ControlPlaneLabel: ""}},
	})
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	// The kubelet writes the Node too (its status, annotations): an update
	// on a copy it has changed since is read again and retried.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: ControlPlaneTaint, Effect: corev1.TaintEffectNoSchedule})
		_, err = c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	return c.SetNodeAddresses(ctx, name, []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: addr}, {Type: corev1.NodeHostName, Address: name}})
}

// JoinMachine is a worker machine joining as mooring-agent makes it join:
// an instance of the local cloud, a client CSR carrying its identity, and,
// once mooring approved it, a kubelet (the fake runtime's) started with
// the credentials at the instance's address. It returns the CSR's name.
func JoinMachine(ctx context.Context, c *testbed.Cluster, lc *LocalCloud, cluster, name string) (string, error) {
	in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Cluster: cluster})
	if err != nil {
		return "", err
	}
	join, err := Join(ctx, c, name, in.MetadataURL)
	if err != nil {
		return "", err
	}
	csr, err := WaitForDecision(ctx, c.Client, join.Name)
	if err != nil {
		return join.Name, err
	}
	if Condition(csr, certificatesv1.CertificateApproved) == nil {
		return join.Name, fmt.Errorf("join of %s not approved: %+v", name, csr.Status.Conditions)
	}
	_, err = c.AddNodeConfig(ctx, testbed.NodeConfig{Name: name, Address: instanceAddress(in, "InternalIP"),
		ClientCertPEM: csr.Status.Certificate, ClientKeyPEM: join.KeyPEM})
	return join.Name, err
}

// PodLogs follows the logs of every container of the pods a label
// selector picks, each from its start, and keeps them after the pods are
// gone: a rollout's replaced pods included.
type PodLogs struct {
	cs        kubernetes.Interface
	namespace string
	selector  string
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu       sync.Mutex
	logs     map[string]*bytes.Buffer // by container ID
	pods     map[string]string        // container ID -> pod name
	followed map[string]bool
}

// FollowPodLogs starts following; Stop ends it.
func FollowPodLogs(cs kubernetes.Interface, namespace, selector string) *PodLogs {
	ctx, cancel := context.WithCancel(context.Background())
	p := &PodLogs{cs: cs, namespace: namespace, selector: selector, cancel: cancel,
		logs: map[string]*bytes.Buffer{}, pods: map[string]string{}, followed: map[string]bool{}}
	p.wg.Add(1)
	go p.watch(ctx)
	return p
}

func (p *PodLogs) watch(ctx context.Context) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		pods, err := p.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector})
		if err == nil {
			for _, pod := range pods.Items {
				for _, st := range pod.Status.ContainerStatuses {
					if st.ContainerID == "" || st.State.Running == nil {
						continue
					}
					p.mu.Lock()
					start := !p.followed[st.ContainerID]
					if start {
						p.followed[st.ContainerID] = true
						p.logs[st.ContainerID] = &bytes.Buffer{}
						p.pods[st.ContainerID] = pod.Name
					}
					p.mu.Unlock()
					if start {
						p.wg.Add(1)
						go p.follow(ctx, pod.Name, st.Name, st.ContainerID)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// follow streams one container's log until it ends. The stream can fail
// while the kubelet has no serving certificate yet: it is tried again,
// from the start, until it works or the container is gone.
func (p *PodLogs) follow(ctx context.Context, pod, container, id string) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		rc, err := p.cs.CoreV1().Pods(p.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		// A new stream starts again from the beginning.
		p.mu.Lock()
		p.logs[id].Reset()
		p.mu.Unlock()
		_, _ = io.Copy(lockedWriter{p, id}, rc)
		rc.Close()
		if ctx.Err() != nil {
			return
		}
		// The stream ended: the container exited, or the connection
		// dropped. A current container's log is read again.
		cur, err := p.cs.CoreV1().Pods(p.namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || !runningContainer(cur, id) {
			return
		}
	}
}

type lockedWriter struct {
	p  *PodLogs
	id string
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.logs[w.id].Write(b)
}

func runningContainer(pod *corev1.Pod, id string) bool {
	for _, st := range pod.Status.ContainerStatuses {
		if st.ContainerID == id && st.State.Running != nil {
			return true
		}
	}
	return false
}

// Logs are the logs read so far, by container ID, and each container's
// pod.
func (p *PodLogs) Logs() (logs map[string]string, pods map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	logs, pods = map[string]string{}, map[string]string{}
	for id, b := range p.logs {
		logs[id], pods[id] = b.String(), p.pods[id]
	}
	return logs, pods
}

// Stop ends following and waits for the streams to end.
func (p *PodLogs) Stop() {
	p.cancel()
	p.wg.Wait()
}
