package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// The pod tests install mooring as users do, from its packaged chart or
// its kustomize overlays, on control-plane nodes whose kubelets run real
// pods (Debian's containerd and runc) from mooring's own images, built by
// hack/images as `make images` builds them and imported from their
// oci-archive tars (no registry; imagePullPolicy IfNotPresent). The pods
// use the host network, and reach kube-apiserver at its own address
// (apiServer.host and .port): nothing routes the kubernetes Service.

const (
	imagesTag, imagesVersion          = "e2e-1", "v0.0.0-e2e.1"
	laterImagesTag, laterImageVersion = "e2e-2", "v0.0.0-e2e.2"
	ccmApp                            = "app.kubernetes.io/name=mooring-ccm"
	approverApp                       = "app.kubernetes.io/name=mooring-csr-approver"
)

// podBed is a control plane with kube-scheduler, mooring as the only
// approver, the local cloud, and n control-plane machines that run pods,
// with the image archives imported.
func podBed(t *testing.T, ctx context.Context, n int, tars ...string) (*testbed.Cluster, *harness.LocalCloud, []*harness.PodNode) {
	t.Helper()
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{Scheduler: true, RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	start := time.Now()
	cps, err := harness.StartControlPlaneNodes(ctx, c, lc, e2eCluster, n, tars...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d control-plane nodes running containerd, images imported, in %v", n, time.Since(start).Round(100*time.Millisecond))
	return c, lc, cps
}

// apiServerHostPort is kube-apiserver's own address, for apiServer.host
// and apiServer.port.
func apiServerHostPort(t *testing.T, c *testbed.Cluster) (string, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(c.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

// localCloudConfig is the local cloud's cloud.yaml as the pods read it,
// with the token mounted next to it; and the token.
func localCloudConfig(t *testing.T, lc *harness.LocalCloud, cluster string) (config, token string) {
	t.Helper()
	tok, err := os.ReadFile(lc.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("endpoint: %s\ntokenFile: /etc/mooring/cloud/token\ncluster: %s\nnodeNamePolicy: InstanceName\n", lc.URL, cluster),
		strings.TrimSpace(string(tok))
}

// chartValues writes the chart's values for the local cloud: the images
// given, the apiserver's own address, and each replica listening on its
// node's address only (the control-plane "machines" of the bed share one
// network namespace, where two replicas on 0.0.0.0 would collide).
func chartValues(t *testing.T, c *testbed.Cluster, lc *harness.LocalCloud, im harness.Images, extra string) string {
	t.Helper()
	config, token := localCloudConfig(t, lc, e2eCluster)
	host, port := apiServerHostPort(t, c)
	values := fmt.Sprintf(`cloud:
  provider: local
  config: |
%s  files:
    token: %q
image:
  ccm:
    repository: %s/mooring-ccm
    tag: %q
  approver:
    repository: %s/mooring-csr-approver
    tag: %q
  pullPolicy: IfNotPresent
ccm:
  clusterName: %s
apiServer:
  host: %q
  port: %s
bindAddress: hostIP
%s`, indent(config, "    "), token, harness.ImageRegistry, im.Tag, harness.ImageRegistry, im.Tag, e2eCluster, host, port, extra)
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}

// waitPodsReady waits until n pods of selector run image, all Ready, and
// returns them.
func waitPodsReady(t *testing.T, ctx context.Context, c *testbed.Cluster, selector, image string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	harness.WaitUntil(ctx, t, fmt.Sprintf("%d pods %s Ready, running %s", n, selector, image), func() (bool, error) {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				return false, fmt.Errorf("pod %s terminating", p.Name)
			}
			if p.Spec.Containers[0].Image != image || !podReady(&p) {
				return false, fmt.Errorf("pod %s: image %s, phase %s", p.Name, p.Spec.Containers[0].Image, p.Status.Phase)
			}
			pods = append(pods, p)
		}
		return len(pods) == n, fmt.Errorf("%d pods", len(pods))
	})
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// apiServerHost is the test bed apiserver's address, which the pods are
// given as KUBERNETES_SERVICE_HOST.
const apiServerHost = "127.0.0.1"

// checkPodsAsShipped checks each pod's running process, from the host:
// uid and gid 65532, no capabilities, no new privileges, a seccomp filter
// (RuntimeDefault), a read-only root file system, the apiserver's own
// address in KUBERNETES_SERVICE_HOST; and that the pods run on distinct
// nodes.
func checkPodsAsShipped(t *testing.T, nodes []*harness.PodNode, pods []corev1.Pod) {
	t.Helper()
	seen := map[string]string{}
	for _, p := range pods {
		if other, ok := seen[p.Spec.NodeName]; ok {
			t.Errorf("pods %s and %s both on %s (the anti-affinity allows one per node)", other, p.Name, p.Spec.NodeName)
		}
		seen[p.Spec.NodeName] = p.Name
		pid := containerPID(t, nodes, &p)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, l := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				fields[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		for k, want := range map[string]string{
			"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532",
			"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
			"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
			"NoNewPrivs": "1", "Seccomp": "2",
		} {
			if fields[k] != want {
				t.Errorf("pod %s (pid %d): %s: %q, want %q", p.Name, pid, k, fields[k], want)
			}
		}
		// In-cluster clients reach the apiserver at apiServer.host, not
		// at the kubernetes Service's ClusterIP, which nothing routes here.
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(environ), "\x00"), "KUBERNETES_SERVICE_HOST="+apiServerHost) {
			t.Errorf("pod %s (pid %d): KUBERNETES_SERVICE_HOST is not the apiserver's %s", p.Name, pid, apiServerHost)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		rootRO := false
		for _, l := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(l)
			if len(f) > 5 && f[4] == "/" {
				rootRO = strings.HasPrefix(f[5], "ro")
			}
		}
		if !rootRO {
			t.Errorf("pod %s (pid %d): root file system not read-only", p.Name, pid)
		}
	}
}

// containerPID is the host PID of the pod's (first) container.
func containerPID(t *testing.T, nodes []*harness.PodNode, p *corev1.Pod) int {
	t.Helper()
	for _, n := range nodes {
		if n.Name != p.Spec.NodeName {
			continue
		}
		if len(p.Status.ContainerStatuses) == 0 {
			t.Fatalf("pod %s: no container status", p.Name)
		}
		pid, err := n.ContainerPID(p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		return pid
	}
	t.Fatalf("pod %s on %s, not on a control-plane node of the bed", p.Name, p.Spec.NodeName)
	return 0
}

// waitNodesReady waits until the Nodes are initialized by the cloud
// controller (providerID, addresses, no uninitialized taint), have a
// serving certificate and are Ready.
func waitNodesReady(t *testing.T, ctx context.Context, c *testbed.Cluster, names ...string) {
	t.Helper()
	for _, name := range names {
		harness.WaitUntil(ctx, t, "node "+name+" initialized and Ready", func() (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !harness.NodeInitialized(n) {
				return false, fmt.Errorf("not initialized: %v %v", n.Spec.ProviderID, n.Spec.Taints)
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return cond.Status == corev1.ConditionTrue, fmt.Errorf("Ready %s: %s", cond.Status, cond.Message)
				}
			}
			return false, nil
		})
		harness.WaitUntil(ctx, t, "node "+name+"'s serving certificate approved by mooring", func() (bool, error) {
			csrs, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, csr := range csrs.Items {
				if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+name {
					if cond := harness.Condition(&csr, certificatesv1.CertificateApproved); cond != nil && cond.Reason == "MooringApproved" && len(csr.Status.Certificate) > 0 {
						return true, nil
					}
				}
			}
			return false, nil
		})
	}
}

// leaseHolder is the holder of a kube-system Lease.
func leaseHolder(ctx context.Context, c *testbed.Cluster, name string) (string, error) {
	l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// leaderContainer is the running container (ID) whose log says it acquired
// lease, the last one to, and the number of containers that did.
func leaderContainer(logs *harness.PodLogs, lease string) (string, int) {
	texts, _ := logs.Logs()
	var leader string
	var at string
	n := 0
	for id, text := range texts {
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, `"Successfully acquired lease" lock="kube-system/`+lease+`"`) {
				n++
				if ts := strings.Fields(l); len(ts) > 1 && ts[0]+ts[1] > at {
					at, leader = ts[0]+ts[1], id
				}
				break
			}
		}
	}
	return leader, n
}

// decisionLines counts each CSR's "CSR decided" lines across every
// container's log.
func decisionLines(logs *harness.PodLogs) map[string]int {
	texts, _ := logs.Logs()
	out := map[string]int{}
	for _, text := range texts {
		for _, l := range strings.Split(text, "\n") {
			if !strings.Contains(l, `"CSR decided"`) {
				continue
			}
			if _, rest, ok := strings.Cut(l, ` csr="`); ok {
				name, _, _ := strings.Cut(rest, `"`)
				out[name]++
			}
		}
	}
	return out
}

// scrapeMetrics GETs /metrics from every endpoint of the metrics Service
// with a ServiceAccount token bound to mooring:metrics-reader (and checks
// that a token without the binding is refused).
func scrapeMetrics(t *testing.T, ctx context.Context, c *testbed.Cluster, service string, want string) {
	t.Helper()
	for _, sa := range []string{"metrics-scraper", "not-a-scraper"} {
		if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "mooring:metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "metrics-scraper", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	good, bad := token("metrics-scraper"), token("not-a-scraper")
	// The Service's endpoints, resolved as its endpoint controller does:
	// the Ready pods its selector picks, at their IPs and the container
	// port its target port names. (kube-apiserver refuses loopback
	// addresses in EndpointSlices, and the bed's pods have the host
	// network's, so the controller cannot write them down.)
	svc, err := c.Client.CoreV1().Services("kube-system").Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "https-metrics" {
		t.Fatalf("service %s: clusterIP %s, ports %+v: want a headless Service with the port https-metrics", service, svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, p := range pods.Items {
		if !podReady(&p) {
			continue
		}
		for _, cp := range p.Spec.Containers[0].Ports {
			if cp.Name == svc.Spec.Ports[0].TargetPort.String() {
				urls = append(urls, "https://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(cp.ContainerPort)))+"/metrics")
			}
		}
	}
	if len(urls) == 0 {
		t.Fatalf("service %s selects no Ready pod with a port %s", service, svc.Spec.Ports[0].TargetPort.String())
	}
	// The programs' serving certificates are self-signed in memory.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, u := range urls {
		for _, tc := range []struct {
			token string
			code  int
		}{{good, http.StatusOK}, {bad, http.StatusForbidden}} {
			harness.WaitUntil(ctx, t, "GET "+u, func() (bool, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				req.Header.Set("Authorization", "Bearer "+tc.token)
				resp, err := client.Do(req)
				if err != nil {
					return false, err
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tc.code {
					return false, fmt.Errorf("%s: %s", resp.Status, firstLine(body))
				}
				if tc.code == http.StatusOK && !strings.Contains(string(body), want) {
					return false, fmt.Errorf("no %s in /metrics", want)
				}
				return true, nil
			})
		}
		t.Logf("scraped %s with a token bound to mooring:metrics-reader (200; unbound: 403)", u)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

func ptrInt64(v int64) *int64 { return &v }

// chartObjects are the objects of a manifest (helm get manifest, or a
// rendering): apiVersion, kind, namespace and name of each.
func chartObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// checkGone checks that none of objs exists any more (waiting for
// graceful deletions), cluster-scoped ones included.
func checkGone(t *testing.T, ctx context.Context, c *testbed.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	// Unthrottled (client-go's default is 5 requests a second): one Get per
	// object, against the bed's own apiserver.
	cfg := rest.CopyConfig(c.AdminConfig)
	cfg.QPS, cfg.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clusterScoped := 0
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ns := o.GetNamespace()
			if ns == "" {
				ns = "kube-system"
			}
			r = dyn.Resource(m.Resource).Namespace(ns)
		} else {
			clusterScoped++
		}
		harness.WaitUntil(ctx, t, fmt.Sprintf("%s %s deleted", o.GetKind(), o.GetName()), func() (bool, error) {
			_, err := r.Get(ctx, o.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
	}
	t.Logf("all %d objects gone (%d cluster-scoped)", len(objs), clusterScoped)
}

// killLeaderPod kills (kill -9) the main process of the running container
// that holds lease and returns how long the lease then had no live holder:
// until another identity holds it.
func killLeaderPod(t *testing.T, ctx context.Context, c *testbed.Cluster, nodes []*harness.PodNode, logs *harness.PodLogs, selector, lease string) time.Duration {
	t.Helper()
	var leader *corev1.Pod
	harness.WaitUntil(ctx, t, "a running leader of "+lease, func() (bool, error) {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		texts, _ := logs.Logs()
		for i, p := range list.Items {
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
				continue
			}
			if strings.Contains(texts[p.Status.ContainerStatuses[0].ContainerID], `"Successfully acquired lease" lock="kube-system/`+lease+`"`) {
				leader = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	held, err := leaseHolder(ctx, c, lease)
	if err != nil || held == "" {
		t.Fatalf("lease %s: holder %q, %v", lease, held, err)
	}
	pid := containerPID(t, nodes, leader)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader, pod %s on %s (pid %d, lease holder %s)", leader.Name, leader.Spec.NodeName, pid, held)
	harness.WaitUntil(ctx, t, "another holder of "+lease, func() (bool, error) {
		h, err := leaseHolder(ctx, c, lease)
		return err == nil && h != "" && h != held, err
	})
	return time.Since(killed)
}

// logTailsIfFailed logs the end of every container's log when the test
// failed.
func logTailsIfFailed(t *testing.T, logs *harness.PodLogs) {
	if !t.Failed() {
		return
	}
	texts, pods := logs.Logs()
	for id, text := range texts {
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		t.Logf("pod %s, container %s, last log lines:\n%s", pods[id], id, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}
