package testbed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mooring-dev/mooring/internal/pki"
)

// Config describes a control plane to start.
type Config struct {
	// Dir holds the control plane's state, certificates and logs. It must
	// exist; the caller removes it.
	Dir string
	// Logf receives progress: start-up times and memory of each component.
	Logf func(format string, args ...any)
	// Binaries to run; the zero value means FindBinaries.
	Binaries Binaries
	// ServiceCIDR is the Service cluster IP range. It is virtual: nothing in
	// the test bed routes to it. Default 10.96.0.0/16.
	ServiceCIDR string
	// ClusterSigningDuration is the lifetime of certificates that
	// kube-controller-manager signs; zero keeps its default (one year).
	ClusterSigningDuration time.Duration
	// ClusterCIDR, when set, makes kube-controller-manager allocate a /24
	// pod CIDR to each Node from it (routes need them). Virtual, like
	// ServiceCIDR.
	ClusterCIDR string
	// NodeMonitorGracePeriod is how long a silent kubelet's Node stays
	// Ready; zero keeps kube-controller-manager's default.
	NodeMonitorGracePeriod time.Duration
	// Controllers are added to kube-controller-manager's --controllers list
	// ("-name" turns one off): the benchmarks turn off
	// node-lifecycle-controller, since their simulated Nodes have no kubelet
	// to heartbeat.
	Controllers []string
	// Profiling serves kube-apiserver's /debug/pprof (to system:masters):
	// the benchmarks take CPU profiles with it.
	Profiling bool
	// APIServerArgs are more kube-apiserver flags (a repeated flag's last
	// value wins).
	APIServerArgs []string
	// Scheduler runs kube-scheduler too, for tests whose pods are
	// scheduled (a Deployment's, on nodes with NodeConfig.Containerd).
	Scheduler bool
}

// ControlPlane is etcd, kube-apiserver and kube-controller-manager on
// loopback, with a cluster CA that signs kubelet certificates.
type ControlPlane struct {
	cfg Config

	// CA is the cluster CA: it signs client certificates, and
	// kube-controller-manager signs approved CSRs with it.
	CA *pki.CA
	// CAFile is the CA certificate on disk.
	CAFile string
	// URL is kube-apiserver's https URL.
	URL string
	// AdminKubeconfig is a kubeconfig for a system:masters user.
	AdminKubeconfig string
	// AdminConfig is the same as a rest.Config.
	AdminConfig *rest.Config
	// Client is a clientset for AdminConfig without client-go's default
	// client-side limit (5 requests/s, bursts of 10): it is the tests' own
	// driver, not a component under test, and under that limit applying a
	// component's RBAC (26 objects) took 1.6 to 3.4 s and each WaitUntil
	// poll waited its turn.
	Client kubernetes.Interface

	id    string     // names this control plane's cgroups
	procs []*process // in start order

	// restartMu serializes RestartComponent and Supervise, which replace
	// entries of procs.
	restartMu sync.Mutex
}

const (
	// kube-apiserver can take more than 15 s to exit on SIGTERM.
	apiserverGrace = 40 * time.Second
	defaultGrace   = 15 * time.Second
	startTimeout   = 90 * time.Second
)

// StartControlPlane starts etcd, kube-apiserver and kube-controller-manager
// and returns when all three are healthy. On error everything already started
// is stopped.
func StartControlPlane(ctx context.Context, cfg Config) (cp *ControlPlane, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("testbed: Config.Dir is empty")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Binaries == (Binaries{}) {
		if cfg.Binaries, err = FindBinaries(); err != nil {
			return nil, err
		}
	}
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = "10.96.0.0/16"
	}
	cp = &ControlPlane{cfg: cfg, id: randomToken(6)}
	defer func() {
		if err != nil {
			err = errors.Join(err, cp.Stop())
			cp = nil
		}
	}()

	begin := time.Now()
	ports, err := FreePorts("127.0.0.1", 4)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	cp.URL = "https://" + hostPort("127.0.0.1", apiPort)
	files, err := cp.writePKI()
	if err != nil {
		return nil, err
	}
	if err := cp.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, files, apiPort, etcdClient); err != nil {
		return nil, err
	}
	if err := cp.startControllerManager(ctx, files, kcmPort); err != nil {
		return nil, err
	}
	if cfg.Scheduler {
		if err := cp.startScheduler(ctx); err != nil {
			return nil, err
		}
	}
	var rss int64
	for _, p := range cp.procs {
		rss += p.rssBytes()
	}
	cfg.Logf("control plane ready in %v, RSS %d MiB (etcd + kube-apiserver + kube-controller-manager)",
		time.Since(begin).Round(time.Millisecond), rss>>20)
	return cp, nil
}

// pkiFiles are the paths of the control plane's certificates and keys.
type pkiFiles struct {
	ca, caKey                         string
	frontProxyCA                      string
	apiserver, apiserverKey           string
	kubeletClient, kubeletClientKey   string
	frontProxyClient, frontProxyKey   string
	serviceAccountKey, serviceAccount string
	controllerManagerKubeconfig       string
}

// writePKI creates the CAs, the components' certificates and the
// kubeconfigs under Dir/pki and Dir.
func (cp *ControlPlane) writePKI() (*pkiFiles, error) {
	dir := filepath.Join(cp.cfg.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("mooring-testbed-ca")
	if err != nil {
		return nil, err
	}
	frontProxy, err := pki.NewCA("mooring-testbed-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	cp.CA = ca
	f := &pkiFiles{}
	if f.ca, f.caKey, err = ca.Write(dir, "ca"); err != nil {
		return nil, err
	}
	if f.frontProxyCA, _, err = frontProxy.Write(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	cp.CAFile = f.ca

	leaves := []struct {
		ca        *pki.CA
		name      string
		req       pki.Request
		cert, key *string
		kubecfg   *string
	}{
		{ca: ca, name: "apiserver", cert: &f.apiserver, key: &f.apiserverKey, req: pki.Request{
			CommonName: "kube-apiserver", Profile: pki.ProfileServer,
			Hosts: []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
				"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", firstIP(cp.cfg.ServiceCIDR)},
		}},
		{ca: ca, name: "apiserver-kubelet-client", cert: &f.kubeletClient, key: &f.kubeletClientKey, req: pki.Request{
			CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Profile: pki.ProfileClient,
		}},
		{ca: frontProxy, name: "front-proxy-client", cert: &f.frontProxyClient, key: &f.frontProxyKey, req: pki.Request{
			CommonName: "front-proxy-client", Profile: pki.ProfileClient,
		}},
		{ca: ca, name: "admin", kubecfg: &cp.AdminKubeconfig, req: pki.Request{
			CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Profile: pki.ProfileClient,
		}},
		{ca: ca, name: "controller-manager", kubecfg: &f.controllerManagerKubeconfig, req: pki.Request{
			CommonName: "system:kube-controller-manager", Profile: pki.ProfileClient,
		}},
	}
	for _, l := range leaves {
		kp, err := l.ca.Issue(l.req)
		if err != nil {
			return nil, err
		}
		if l.kubecfg != nil {
			*l.kubecfg = filepath.Join(cp.cfg.Dir, l.name+".kubeconfig")
			if err := writeKubeconfig(*l.kubecfg, cp.URL, ca.CertPEM, l.req.CommonName,
				credentials{certPEM: kp.CertPEM, keyPEM: kp.KeyPEM}); err != nil {
				return nil, err
			}
			continue
		}
		if *l.cert, *l.key, err = kp.Write(dir, l.name); err != nil {
			return nil, err
		}
	}

	saKey, saPub, err := pki.NewSigningKey()
	if err != nil {
		return nil, err
	}
	f.serviceAccountKey, f.serviceAccount = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(f.serviceAccountKey, saKey, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.serviceAccount, saPub, 0o644); err != nil {
		return nil, err
	}

	if cp.AdminConfig, err = restConfigFromFile(cp.AdminKubeconfig); err != nil {
		return nil, err
	}
	unlimited := rest.CopyConfig(cp.AdminConfig)
	unlimited.QPS, unlimited.Burst = -1, 0
	if cp.Client, err = kubernetes.NewForConfig(unlimited); err != nil {
		return nil, err
	}
	return f, nil
}

// firstIP is the first host address of an IPv4 CIDR (the kubernetes
// Service's ClusterIP).
func firstIP(cidr string) string {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return ""
	}
	ip := n.IP.To4()
	if ip == nil {
		return ""
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out.String()
}

func (cp *ControlPlane) start(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(name, filepath.Join(cp.cfg.Dir, "logs", name+".log"), bin, args...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// waitHealthy polls url with client until it answers 200, the process exits,
// or startTimeout passes; it logs the start-up time and RSS.
func (cp *ControlPlane) waitHealthy(ctx context.Context, p *process, client *http.Client, url string) error {
	err := waitFor(startTimeout, 100*time.Millisecond, p.name+" health", func() (bool, error) {
		if done, _ := p.exited(); done {
			return false, errExited
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", url, resp.Status)
		}
		return true, nil
	})
	if err != nil {
		return p.failure(err)
	}
	cp.cfg.Logf("%s ready in %v, RSS %d MiB, pid %d", p.name,
		time.Since(p.started).Round(time.Millisecond), p.rssBytes()>>20, p.pid())
	return nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	client := "http://" + hostPort("127.0.0.1", clientPort)
	peer := "http://" + hostPort("127.0.0.1", peerPort)
	p, err := cp.start("etcd", cp.cfg.Binaries.Etcd,
		"--name=testbed",
		"--data-dir="+filepath.Join(cp.cfg.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=testbed="+peer,
	)
	if err != nil {
		return err
	}
	return cp.waitHealthy(ctx, p, http.DefaultClient, client+"/health")
}

// apiServerArgs is args, then Config.APIServerArgs.
func (cp *ControlPlane) apiServerArgs(args ...string) []string {
	return append(args, cp.cfg.APIServerArgs...)
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, f *pkiFiles, port, etcdPort int) error {
	p, err := cp.start("kube-apiserver", cp.cfg.Binaries.KubeAPIServer, cp.apiServerArgs(
		"--etcd-servers=http://"+hostPort("127.0.0.1", etcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+f.apiserver, "--tls-private-key-file="+f.apiserverKey,
		"--client-ca-file="+f.ca,
		"--service-account-key-file="+f.serviceAccount,
		"--service-account-signing-key-file="+f.serviceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+cp.cfg.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth",
		"--allow-privileged",
		"--kubelet-client-certificate="+f.kubeletClient, "--kubelet-client-key="+f.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--requestheader-client-ca-file="+f.frontProxyCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+f.frontProxyClient, "--proxy-client-key-file="+f.frontProxyKey,
		"--shutdown-delay-duration=0s",
		fmt.Sprintf("--profiling=%t", cp.cfg.Profiling),
	)...)
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cp.AdminConfig)
	if err != nil {
		return err
	}
	return cp.waitHealthy(ctx, p, client, cp.URL+"/readyz")
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, f *pkiFiles, port int) error {
	args := []string{
		"--kubeconfig=" + f.controllerManagerKubeconfig,
		"--authentication-kubeconfig=" + f.controllerManagerKubeconfig,
		"--authorization-kubeconfig=" + f.controllerManagerKubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--controllers=" + strings.Join(append([]string{"*", "bootstrapsigner", "tokencleaner"}, cp.cfg.Controllers...), ","),
		"--cluster-signing-cert-file=" + f.ca, "--cluster-signing-key-file=" + f.caKey,
		"--root-ca-file=" + f.ca,
		"--service-account-private-key-file=" + f.serviceAccountKey,
		"--use-service-account-credentials",
		"--service-cluster-ip-range=" + cp.cfg.ServiceCIDR,
		"--cluster-name=mooring-testbed",
		"--leader-elect=false",
		"--profiling=false",
	}
	if d := cp.cfg.ClusterSigningDuration; d > 0 {
		args = append(args, "--cluster-signing-duration="+d.String())
	}
	if cp.cfg.ClusterCIDR != "" {
		args = append(args, "--allocate-node-cidrs", "--cluster-cidr="+cp.cfg.ClusterCIDR, "--node-cidr-mask-size=24")
	}
	if d := cp.cfg.NodeMonitorGracePeriod; d > 0 {
		args = append(args, "--node-monitor-grace-period="+d.String())
	}
	p, err := cp.start("kube-controller-manager", cp.cfg.Binaries.KubeControllerManager, args...)
	if err != nil {
		return err
	}
	// /healthz is open to anonymous callers; the serving certificate is
	// self-signed.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return cp.waitHealthy(ctx, p, insecure, "https://"+hostPort("127.0.0.1", port)+"/healthz")
}

// startScheduler runs kube-scheduler as system:kube-scheduler (the
// cluster's own bindings grant it what it needs).
func (cp *ControlPlane) startScheduler(ctx context.Context) error {
	if cp.cfg.Binaries.KubeScheduler == "" {
		return errors.New("testbed: kube-scheduler is missing; build it with `make kube-bins` (hack/build-k8s.sh)")
	}
	kubeconfig, err := cp.WriteKubeconfig("scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	ports, err := FreePorts("127.0.0.1", 1)
	if err != nil {
		return err
	}
	p, err := cp.start("kube-scheduler", cp.cfg.Binaries.KubeScheduler,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[0]),
		"--leader-elect=false",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return cp.waitHealthy(ctx, p, insecure, "https://"+hostPort("127.0.0.1", ports[0])+"/healthz")
}

// Stop stops the control plane's processes in reverse start order and
// reports any process of theirs still alive afterwards.
func (cp *ControlPlane) Stop() error {
	return stopAll(cp.procs, map[string]time.Duration{"kube-apiserver": apiserverGrace})
}

// LogDir is where each component writes its log.
func (cp *ControlPlane) LogDir() string { return filepath.Join(cp.cfg.Dir, "logs") }

// stopAll stops procs in reverse order and checks that nothing of their
// process groups is left.
func stopAll(procs []*process, grace map[string]time.Duration) error {
	var errs []error
	pgids := map[int]string{}
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		g, ok := grace[p.name]
		if !ok {
			g = defaultGrace
		}
		pgids[p.pid()] = p.name
		if err := p.stop(g); err != nil {
			errs = append(errs, err)
		}
	}
	// A process killed by the group's SIGKILL is gone once the kernel
	// has run it to its exit, which a loaded machine takes a moment for.
	alive := processGroupsAlive(pgids)
	for deadline := time.Now().Add(5 * time.Second); len(alive) > 0 && time.Now().Before(deadline); alive = processGroupsAlive(pgids) {
		time.Sleep(50 * time.Millisecond)
	}
	if len(alive) > 0 {
		errs = append(errs, fmt.Errorf("processes left after stop: %s", strings.Join(alive, ", ")))
	}
	return errors.Join(errs...)
}
