package agent

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/internal/atomicfile"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/pki"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/systemd"
)

// fakeIdentity is a metadata service that can be down.
type fakeIdentity struct {
	down      atomic.Int32 // calls still to fail
	evidences atomic.Int32
	// unsigned: a cloud that signs no instance identity.
	unsigned bool
}

func (f *fakeIdentity) Instance(context.Context) (nodeid.Instance, error) {
	if f.down.Load() > 0 {
		f.down.Add(-1)
		return nodeid.Instance{}, errors.New("metadata service unreachable")
	}
	return nodeid.Instance{ID: "i-1", Name: "node-1", NodeName: "node-1", ProviderID: "local://i-1", InternalIP: "127.0.0.1"}, nil
}

func (f *fakeIdentity) Evidence(_ context.Context, binding string) (evidence.Block, error) {
	f.evidences.Add(1)
	if f.unsigned {
		return evidence.Block{}, nodeid.ErrNoEvidence
	}
	return evidence.Block{Type: "MOORING LOCAL IDENTITY TOKEN", Data: []byte("token-for-" + binding)}, nil
}

// approver answers CSRs in the fake apiserver: approve and sign with the
// CA, or deny.
type approver struct {
	ca   *pki.CA
	deny bool
	// denyFirst CSRs are denied with denyReason, then all are approved.
	denyFirst  int32
	denyReason string
	created    atomic.Int32
	// ignore leaves new CSRs undecided.
	ignore atomic.Bool
}

func (ap *approver) run(ctx context.Context, t *testing.T, client *fake.Clientset) {
	w, err := client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	defer w.Stop()
	for {
		var ev watch.Event
		select {
		case <-ctx.Done():
			return
		case ev = <-w.ResultChan():
		}
		if ev.Type != watch.Added {
			continue
		}
		if ap.ignore.Load() {
			continue
		}
		ap.decide(ctx, t, client, ev.Object.(*certificatesv1.CertificateSigningRequest))
	}
}

// decide approves (and signs) or denies a CSR as the approver is set up to.
func (ap *approver) decide(ctx context.Context, t *testing.T, client *fake.Clientset, in *certificatesv1.CertificateSigningRequest) {
	var err error
	n := ap.created.Add(1)
	csr := in.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "MooringApproved"}
	deny := ap.deny || n <= ap.denyFirst
	switch {
	case ap.deny:
		cond = certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue,
			Reason: "NoEvidence", Message: "no evidence"}
	case deny:
		cond = certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue,
			Reason: ap.denyReason, Message: "test denial"}
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if !deny {
		if csr.Status.Certificate, err = ap.ca.SignCSR(csr.Spec.Request, pki.ProfileClient); err != nil {
			t.Error(err)
		}
	}
	if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
	go reannounce(ctx, client, csr.Name)
}

// reannounce updates a decided CSR again a little later. The fake's watch
// does not replay from a resourceVersion as the apiserver's does, so a
// waiter whose watch starts just after the decision would miss it.
func reannounce(ctx context.Context, client *fake.Clientset, name string) {
	for _, d := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		csrs := client.CertificatesV1().CertificateSigningRequests()
		if cur, err := csrs.Get(ctx, name, metav1.GetOptions{}); err == nil {
			_, _ = csrs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		}
	}
}

type env struct {
	t        *testing.T
	dir      string
	ca       *pki.CA
	client   *fake.Clientset
	approver *approver
	identity *fakeIdentity
	units    *systemd.FakeConn
	notifier *systemd.FakeNotifier
	cfg      Config
	// unsignedCloud: the identity is marked nodeid.Unsigned.
	unsignedCloud bool
	// tpmKey: the identity names this TPM key (nodeid.TPMKeyer).
	tpmKey *node.Key
}

// unsignedIdentity is the identity of a cloud that marks itself as signing
// nothing (nodeid.Unsigned).
type unsignedIdentity struct{ *fakeIdentity }

func (unsignedIdentity) SignsNoIdentity() {}

func newEnv(t *testing.T) *env {
	t.Helper()
	ca, err := pki.NewCA("test-cluster-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{
		t: t, dir: dir, ca: ca, identity: &fakeIdentity{},
		approver: &approver{ca: ca},
		cfg: Config{
			APIServer: "https://127.0.0.1:6443", CAFile: caFile, BootstrapTokenFile: tokenFile, Cloud: "local",
			MetadataURL: "http://127.0.0.1:8169", CertDir: filepath.Join(dir, "pki"), Kubeconfig: filepath.Join(dir, "kubelet.conf"),
			KubeletEnvFile: filepath.Join(dir, "kubelet.env"), KubeletUnit: "kubelet.service",
			KubeletConfigFile:        filepath.Join(dir, "kubelet", "config.yaml"),
			ContainerRuntimeEndpoint: startFakeCRI(t, &fakeCRI{driver: runtimeapi.CgroupDriver_SYSTEMD}).endpoint,
		},
	}
	e.cfg.SetDefaults()
	e.newCluster()
	return e
}

// newCluster starts a fresh fake apiserver with the approver watching it.
func (e *env) newCluster() {
	e.client = fake.NewClientset()
	// The fake ignores field selectors; the agent's wait for its CSR selects
	// it by name, which the apiserver honours.
	client := e.client
	client.PrependWatchReactor("certificatesigningrequests", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), "")
		sel := action.(k8stesting.WatchActionImpl).WatchRestrictions.Fields
		if err != nil || sel == nil || sel.Empty() {
			return true, w, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			m, ok := ev.Object.(metav1.Object)
			return ev, ok && sel.Matches(fields.Set{"metadata.name": m.GetName()})
		}), nil
	})
	client.PrependReactor("list", "certificatesigningrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sel := action.(k8stesting.ListActionImpl).ListRestrictions.Fields
		if sel == nil || sel.Empty() {
			return false, nil, nil
		}
		obj, err := client.Tracker().List(action.GetResource(), action.(k8stesting.ListActionImpl).Kind, "")
		if err != nil {
			return true, nil, err
		}
		l := obj.(*certificatesv1.CertificateSigningRequestList)
		l.Items = slices.DeleteFunc(l.Items, func(c certificatesv1.CertificateSigningRequest) bool {
			return !sel.Matches(fields.Set{"metadata.name": c.Name})
		})
		return true, l, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.approver.run(ctx, e.t, e.client) })
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	// Let the watch start before the agent files its CSR.
	time.Sleep(20 * time.Millisecond)
}

func (e *env) agent() *Agent {
	e.units, e.notifier = systemd.NewFakeConn(), &systemd.FakeNotifier{}
	var identity nodeid.Identity = e.identity
	if e.unsignedCloud {
		identity = unsignedIdentity{e.identity}
	}
	if e.tpmKey != nil {
		identity = tpmIdentity{e.identity, *e.tpmKey}
	}
	return &Agent{
		Config: e.cfg, Identity: identity, Notifier: e.notifier, Units: systemd.NewUnits(e.units),
		NewClient:     func(string, []byte, string) (Client, error) { return fakeClient{e.client}, nil },
		NewNodeClient: func(string) (Client, error) { return fakeClient{e.client}, nil },
		Backoff:       wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20},
		DenialBackoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 20},
	}
}

func (e *env) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.agent().Run(ctx)
}

func (e *env) csrCount() int {
	l, err := e.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(l.Items)
}

func (e *env) checkJoined() {
	e.t.Helper()
	if err := validCredentials(filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem"), e.ca.CertPEM, "node-1", time.Now()); err != nil {
		e.t.Fatalf("credentials: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(e.cfg.Kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if !strings.HasSuffix(auth.ClientCertificate, "kubelet-client-current.pem") || auth.ClientKey != auth.ClientCertificate {
		e.t.Fatalf("kubeconfig credentials: %+v", auth)
	}
	env, err := os.ReadFile(e.cfg.KubeletEnvFile)
	if err != nil || !strings.Contains(string(env), "--provider-id=local://i-1") || !strings.Contains(string(env), "--node-ip=127.0.0.1") ||
		!strings.Contains(string(env), "--hostname-override=node-1") {
		e.t.Fatalf("kubelet env: %q, %v", env, err)
	}
	for path, mode := range map[string]os.FileMode{e.cfg.Kubeconfig: 0o600, e.cfg.KubeletEnvFile: 0o644, e.cfg.KubeletConfigFile: 0o644} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != mode {
			e.t.Fatalf("%s: mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}
	if _, err := os.Stat(filepath.Join(e.cfg.CertDir, keyTmp)); !os.IsNotExist(err) {
		e.t.Fatalf("the temporary key is left behind: %v", err)
	}
	if !slices.Equal(e.units.StartedUnits(), []string{"kubelet.service"}) {
		e.t.Fatalf("units started: %v", e.units.StartedUnits())
	}
	sent := e.notifier.Sent()
	if !slices.Contains(sent, "READY=1") {
		e.t.Fatalf("no READY=1 in %q", sent)
	}
}

func TestFreshJoin(t *testing.T) {
	e := newEnv(t)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want 1", n)
	}
	// Every boot after: valid credentials, no CSR, kubelet started again.
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("a second boot filed a CSR: %d", n)
	}
}

func TestResumeAfterKeyGeneration(t *testing.T) {
	e := newEnv(t)
	// The key of a run killed right after making it.
	data, key, err := loadOrCreateKey(filepath.Join(e.cfg.CertDir, keyTmp))
	if err != nil || len(data) == 0 {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	got, err := e.client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), mustCSRName(t, "node-1", key.Public()), metav1.GetOptions{})
	if err != nil || got == nil {
		t.Fatalf("the CSR was not made with the key left behind: %v", err)
	}
}

func TestResumeAfterCSRCreation(t *testing.T) {
	e := newEnv(t)
	// A run killed while waiting: its CSR is filed and approved meanwhile.
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	// Roll the node back to "CSR filed, nothing written": restore the key,
	// drop the certificate, kubeconfig and env.
	pair, _ := os.ReadFile(filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem"))
	keyPEM := keyBlock(t, pair)
	if err := os.RemoveAll(e.cfg.CertDir); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(e.cfg.Kubeconfig)
	if err := atomicfile.Write(filepath.Join(e.cfg.CertDir, keyTmp), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("the restart filed another CSR: %d", n)
	}
}

func keyBlock(t *testing.T, pair []byte) []byte {
	t.Helper()
	i := strings.Index(string(pair), "-----BEGIN EC PRIVATE KEY-----")
	if i < 0 {
		t.Fatalf("no key in the pair file")
	}
	return pair[i:]
}

func TestResumeBeforeKubeconfigWrite(t *testing.T) {
	e := newEnv(t)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.cfg.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.cfg.KubeletEnvFile); err != nil {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want 1", n)
	}
}

func TestCorruptOrExpiredCredentialsRejoin(t *testing.T) {
	e := newEnv(t)
	current := filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem")
	if err := os.MkdirAll(e.cfg.CertDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(current, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	// The pair expires: a run far in the future joins again.
	a := e.agent()
	a.Now = func() time.Time { return time.Now().Add(20 * 365 * 24 * time.Hour) }
	if err := validCredentials(current, e.ca.CertPEM, "node-1", a.Now()); err == nil {
		t.Fatal("an expired certificate counted as valid")
	}
	// A certificate of another CA, or another node, is not valid either.
	other, _ := pki.NewCA("other")
	if err := validCredentials(current, other.CertPEM, "node-1", time.Now()); err == nil {
		t.Fatal("a certificate of another CA counted as valid")
	}
	if err := validCredentials(current, e.ca.CertPEM, "node-2", time.Now()); err == nil {
		t.Fatal("another node's certificate counted as valid")
	}
}

func TestDeniedStopsWithTheReason(t *testing.T) {
	e := newEnv(t)
	e.approver.deny = true
	err := e.run()
	var denied *DeniedError
	if !errors.As(err, &denied) || denied.Reason != "NoEvidence" {
		t.Fatalf("err = %v, want a denial with its reason", err)
	}
	// A restart finds the denied CSR and files no new one.
	err = e.run()
	if !errors.As(err, &denied) {
		t.Fatalf("restart: %v", err)
	}
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs after a denial and a restart, want 1", n)
	}
	if len(e.units.StartedUnits()) != 0 {
		t.Fatal("the kubelet was started after a denial")
	}
}

// A denial that can pass (the evidence expired while the approver was
// down, say) used to stop the agent for good with the same key and CSR name.
func TestDenialThatCanPassJoinsAgainWithAFreshKey(t *testing.T) {
	for _, reason := range csrreason.Retryable() {
		t.Run(reason, func(t *testing.T) {
			e := newEnv(t)
			e.approver.denyFirst, e.approver.denyReason = 2, reason
			if err := e.run(); err != nil {
				t.Fatalf("join after two %s denials: %v", reason, err)
			}
			e.checkJoined()
			l, err := e.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string]bool{}
			for _, c := range l.Items {
				keys[c.Name] = true
			}
			if len(keys) != 3 {
				t.Fatalf("%d CSRs under distinct names (keys), want 3: %v", len(keys), keys)
			}
		})
	}
}

// A killed agent whose CSR was denied for a reason that can pass resumes
// with a fresh key; one denied for good stays stopped (TestDeniedStopsWithTheReason).
func TestRestartAfterADenialThatCanPass(t *testing.T) {
	e := newEnv(t)
	e.approver.denyFirst, e.approver.denyReason = 1, csrreason.EvidenceExpired
	ctx, cancel := context.WithCancel(context.Background())
	a := e.agent()
	a.DenialBackoff = wait.Backoff{Duration: time.Hour, Steps: 1}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for e.approver.created.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel() // killed while waiting to join again
	<-done
	if err := e.run(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 2 {
		t.Fatalf("%d CSRs, want the denied one and one with a fresh key", n)
	}
}

func TestAddressIsLocal(t *testing.T) {
	for ip, want := range map[string]bool{"127.0.0.1": true, "127.10.0.7": true, "::1": true, "203.0.113.9": false, "not an ip": false} {
		if got := addressIsLocal(ip); got != want {
			t.Errorf("addressIsLocal(%q) = %v, want %v", ip, got, want)
		}
	}
}

func TestMetadataDownRetriesWithStatus(t *testing.T) {
	e := newEnv(t)
	e.identity.down.Store(3)
	a := e.agent()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var retries int
	for _, m := range e.notifier.Sent() {
		if strings.Contains(m, "instance metadata failed, retrying") && strings.Contains(m, "unreachable") {
			retries++
		}
	}
	if retries != 3 {
		t.Fatalf("%d retry statuses, want 3: %q", retries, e.notifier.Sent())
	}
}

func TestApiserverUnreachableGivesUpOnlyWithTheContext(t *testing.T) {
	e := newEnv(t)
	a := e.agent()
	a.NewClient = func(string, []byte, string) (Client, error) {
		return NewClientForConfig(&restConfigUnreachable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := a.Run(ctx)
	var cfgErr *ConfigError
	if err == nil || !strings.Contains(err.Error(), "certificate request") || errors.As(err, &cfgErr) {
		t.Fatalf("err = %v, want the context's end (not a configuration error)", err)
	}
	if len(e.units.StartedUnits()) != 0 {
		t.Fatal("the kubelet was started without credentials")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	cases := map[string]string{
		"apiServer":            "caFile: /ca\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\n",
		"caFile or caCertHash": "apiServer: https://a\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\n",
		"caCertHash":           "apiServer: https://a\ncaCertHash: md5:x\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\n",
		"bootstrapTokenFile":   "apiServer: https://a\ncaFile: /ca\ncloud: local\nmetadataURL: http://x\n",
		"cloud":                "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: aws\nmetadataURL: http://x\n",
		"metadataURL":          "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: local\n",
		"certDir":              "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\ncertDir: relative\n",
		"joinTicketFile":       "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\njoinTicketFile: ticket\n",
		"unknown field":        "apiServer: https://a\ncaFile: /ca\nbootstrapTokenFile: /t\ncloud: local\nmetadataURL: http://x\nbogus: 1\n",
	}
	for field, text := range cases {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		want := field
		if field == "unknown field" {
			want = "bogus"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}

// restConfigUnreachable points at a loopback port nothing listens on.
var restConfigUnreachable = rest.Config{Host: "https://127.0.0.1:1", Timeout: 100 * time.Millisecond}

func mustCSRName(t *testing.T, node string, pub crypto.PublicKey) string {
	t.Helper()
	name, err := CSRName(node, pub)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// runAsync runs the agent in the background; the returned function waits
// for its result.
func (e *env) runAsync(a *Agent) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() error { defer cancel(); return <-done }
}

// waitStatus waits until the agent has sent a STATUS containing each of
// parts.
func (e *env) waitStatus(parts ...string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range e.notifier.Sent() {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(m, p) }) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no STATUS with %q in %q", parts, e.notifier.Sent())
}

func TestUndecidedWaitIsResumed(t *testing.T) {
	e := newEnv(t)
	e.approver.ignore.Store(true)
	e.cfg.WaitTimeout.Duration = 100 * time.Millisecond
	a := e.agent()
	wait := e.runAsync(a)
	// Watches end undecided (as when the apiserver goes away); the agent
	// looks at its CSR and watches again instead of giving up.
	e.waitStatus("certificate request mooring-node-1-", "undecided after", "watching it again")
	l, err := e.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("CSRs: %v, %v", l, err)
	}
	e.approver.decide(context.Background(), t, e.client, &l.Items[0])
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want the one filed", n)
	}
}

func TestCSRDeletedWhilePendingIsFiledAgain(t *testing.T) {
	e := newEnv(t)
	e.approver.ignore.Store(true)
	a := e.agent()
	wait := e.runAsync(a)
	e.waitStatus("waiting for the approval of certificate request")
	csrs := e.client.CertificatesV1().CertificateSigningRequests()
	l, err := csrs.List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("CSRs: %v, %v", l, err)
	}
	// Deleted undecided (by kube-controller-manager's csrcleaner after an
	// hour, or by an admin): the agent files it again, with fresh evidence.
	e.approver.ignore.Store(false)
	if err := csrs.Delete(context.Background(), l.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want the one filed again", n)
	}
	if n := e.identity.evidences.Load(); n != 2 {
		t.Fatalf("%d evidence requests, want 2 (one per CSR filed)", n)
	}
}

func TestFailedWritesAreRetriedWithStatus(t *testing.T) {
	e := newEnv(t)
	// The kubeconfig's directory cannot be made (a file is in the way), as
	// a full disk refuses a write: the agent keeps its certificate and
	// retries, saying why.
	blocked := filepath.Join(e.dir, "etc-kubernetes")
	if err := os.WriteFile(blocked, []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg.Kubeconfig = filepath.Join(blocked, "kubelet.conf")
	a := e.agent()
	wait := e.runAsync(a)
	e.waitStatus("write "+e.cfg.Kubeconfig+" failed, retrying", "not a directory")
	if len(e.units.StartedUnits()) != 0 || slices.Contains(e.notifier.Sent(), "READY=1") {
		t.Fatal("READY=1 or the kubelet started before the kubeconfig was written")
	}
	if err := os.Remove(blocked); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want 1", n)
	}
}

func TestStorePairFailureKeepsTheCurrentPair(t *testing.T) {
	e := newEnv(t)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem")
	before, err := os.Readlink(current)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := os.ReadFile(current)
	if err != nil {
		t.Fatal(err)
	}
	// The temporary link's name is taken by a directory that cannot be
	// removed: the swap fails after the new pair file was written.
	blocker := filepath.Join(e.cfg.CertDir, ".kubelet-client-current.pem.tmp")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := storePair(e.cfg.CertDir, pair, keyBlock(t, pair), later); err == nil {
		t.Fatal("storePair succeeded with its link's name taken")
	}
	if after, err := os.Readlink(current); err != nil || after != before {
		t.Fatalf("current pair moved: %q -> %q (%v)", before, after, err)
	}
	if err := validCredentials(current, e.ca.CertPEM, "node-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	// Every pair file present is whole (no torn file from the attempt).
	files, _ := filepath.Glob(filepath.Join(e.cfg.CertDir, "kubelet-client-2*.pem"))
	for _, f := range files {
		if err := validCredentials(f, e.ca.CertPEM, "node-1", time.Now()); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestKubeletStoreReadsThePair: the kubelet's own certificate store
// (client-go's util/certificate file store, as the kubelet makes it for
// its client pair) loads what the agent wrote, the same certificate, and
// rotates over it. The agent keeps its own writer: that package links
// client-go's clientset, every API group, which the agent does not link
// (client.go).
func TestKubeletStoreReadsThePair(t *testing.T) {
	e := newEnv(t)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem")
	// The kubeconfig the agent writes names the pair as both files.
	store, err := certificate.NewFileStore("kubelet-client", e.cfg.CertDir, e.cfg.CertDir, current, current)
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.Current()
	if err != nil {
		t.Fatalf("the kubelet's store cannot load the agent's pair: %v", err)
	}
	pair, err := os.ReadFile(current)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pair)
	if block == nil || !bytes.Equal(got.Certificate[0], block.Bytes) || got.Leaf == nil || got.Leaf.Subject.CommonName != "system:node:node-1" {
		t.Fatalf("the kubelet's store loaded another certificate: %v", got.Leaf)
	}
	// A rotation by the kubelet replaces the agent's link.
	if _, err := store.Update(pair, keyBlock(t, pair)); err != nil {
		t.Fatalf("the kubelet's store cannot rotate over the agent's layout: %v", err)
	}
	if err := validCredentials(current, e.ca.CertPEM, "node-1", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// withTicket configures e's agent with a join ticket file holding text.
func (e *env) withTicket(text string) {
	e.t.Helper()
	e.cfg.JoinTicketFile = filepath.Join(e.t.TempDir(), "join-ticket")
	if err := os.WriteFile(e.cfg.JoinTicketFile, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// TestJoinWithATicket: the join presents the ticket as its one evidence
// block, and the cloud is not asked for signed evidence.
func TestJoinWithATicket(t *testing.T) {
	e := newEnv(t)
	e.identity.unsigned = true
	e.withTicket("\n  header.claims.signature \n")
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	e.checkJoined()
	l, err := e.client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("CSRs: %d, %v", len(l.Items), err)
	}
	_, blocks, err := evidence.Decode(l.Items[0].Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].Type != ticket.BlockType || string(blocks[0].Data) != "header.claims.signature" {
		t.Fatalf("evidence %+v", blocks)
	}
	if n := e.identity.evidences.Load(); n != 0 {
		t.Fatalf("the cloud was asked for evidence %d times", n)
	}
}

// TestTicketDenialIsFinal: the denied request holds the ticket, so the
// agent does not ask again with it, even for a reason that can pass.
func TestTicketDenialIsFinal(t *testing.T) {
	e := newEnv(t)
	e.withTicket("header.claims.signature")
	e.approver.denyFirst, e.approver.denyReason = 1, csrreason.InstanceNotRunning
	err := e.run()
	var denied *DeniedError
	if !errors.As(err, &denied) || !strings.Contains(err.Error(), "new one") {
		t.Fatalf("err = %v, want the denial and that a new ticket is needed", err)
	}
	if n := e.csrCount(); n != 1 {
		t.Fatalf("%d CSRs, want 1", n)
	}
}

// TestNoEvidenceNoTicket: on a cloud that signs no identity, an agent
// without a ticket stops at once and says what it needs; so does one whose
// ticket file is missing or empty. No CSR is filed.
func TestNoEvidenceNoTicket(t *testing.T) {
	for name, setup := range map[string]func(e *env){
		"no ticket":      func(e *env) { e.identity.unsigned = true },
		"missing ticket": func(e *env) { e.cfg.JoinTicketFile = filepath.Join(e.t.TempDir(), "nope") },
		"empty ticket":   func(e *env) { e.withTicket(" \n") },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			setup(e)
			err := e.run()
			var cfgErr *ConfigError
			if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "ticket") || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want a configuration error about the join ticket", err)
			}
			if n := e.csrCount(); n != 0 {
				t.Fatalf("%d CSRs filed", n)
			}
		})
	}
}

// JoinRequest makes what the approver reads: the node's CSR of the key,
// then one evidence block bound to that key, under the key's CSR name.
func TestJoinRequest(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := &fakeIdentity{}
	name, request, err := JoinRequest(context.Background(), id, "node-7", key)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustCSRName(t, "node-7", key.Public()); name != want {
		t.Errorf("name %q, want %q", name, want)
	}
	req, blocks, err := evidence.Decode(request)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:node-7" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", req.Subject)
	}
	if !key.PublicKey.Equal(req.PublicKey) {
		t.Error("the request is not of the key")
	}
	binding, err := evidence.Binding(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || string(blocks[0].Data) != "token-for-"+binding || id.evidences.Load() != 1 {
		t.Errorf("evidence %q (%d asked), want one block bound to %s", blocks, id.evidences.Load(), binding)
	}
}

// TestBadFilesStopAtOnce: a file the config names that is missing or
// malformed (the bootstrap token, the CA bundle, the join ticket) is a
// ConfigError, found before the agent asks the metadata service (down for
// good here) or the apiserver anything, so it stops at once instead of
// retrying. A node already joined does not need its token or ticket any
// more (with caFile), and a corrupt pair leads to a join that meets the
// same error.
func TestBadFilesStopAtOnce(t *testing.T) {
	const metadataDown = 1 << 30
	write := func(e *env, path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		setup func(e *env)
		want  string
	}{
		"token missing":   {func(e *env) { e.cfg.BootstrapTokenFile = filepath.Join(e.dir, "none") }, "bootstrapTokenFile: open " + "%DIR%/none"},
		"token malformed": {func(e *env) { write(e, e.cfg.BootstrapTokenFile, "abcdef:0123456789abcdef\n") }, "not a bootstrap token"},
		"token malformed, caCertHash": {func(e *env) {
			e.cfg.CAFile, e.cfg.CACertHash = "", "sha256:"+strings.Repeat("ab", 32)
			write(e, e.cfg.BootstrapTokenFile, "ABCDEF.0123456789abcdef")
		}, "not a bootstrap token"},
		"CA missing":     {func(e *env) { e.cfg.CAFile = filepath.Join(e.dir, "none.crt") }, "caFile: open"},
		"CA not PEM":     {func(e *env) { write(e, e.cfg.CAFile, "not a certificate\n") }, "caFile %DIR%/ca.crt:"},
		"ticket missing": {func(e *env) { e.cfg.JoinTicketFile = filepath.Join(e.dir, "none") }, "joinTicketFile: open"},
		"ticket empty":   {func(e *env) { e.withTicket("\n") }, "join-ticket is empty"},
		"no ticket on a cloud that signs nothing": {func(e *env) { e.unsignedCloud = true },
			"joinTicketFile: required to join on the local cloud, which signs no instance identity"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c.setup(e)
			e.identity.down.Store(metadataDown)
			began := time.Now()
			err := e.run()
			var cfgErr *ConfigError
			want := strings.ReplaceAll(c.want, "%DIR%", e.dir)
			if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want a ConfigError with %q", err, want)
			}
			if took := time.Since(began); took > 2*time.Second {
				t.Fatalf("took %v", took)
			}
			if n := e.identity.down.Load(); n != metadataDown {
				t.Fatalf("the metadata service was asked %d times", metadataDown-n)
			}
			for _, m := range e.notifier.Sent() {
				if strings.Contains(m, "retrying") {
					t.Fatalf("retried: %q", e.notifier.Sent())
				}
			}
			if n := e.csrCount(); n != 0 {
				t.Fatalf("%d CSRs filed", n)
			}
		})
	}

	t.Run("joined, token and ticket gone", func(t *testing.T) {
		e := newEnv(t)
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		e.cfg.BootstrapTokenFile = filepath.Join(e.dir, "none")
		e.cfg.JoinTicketFile = filepath.Join(e.dir, "none")
		if err := e.run(); err != nil {
			t.Fatalf("a joined node's run: %v", err)
		}
		// On a cloud that signs nothing, without joinTicketFile at all.
		e.cfg.JoinTicketFile, e.unsignedCloud = "", true
		if err := e.run(); err != nil {
			t.Fatalf("a joined node's run without a ticket: %v", err)
		}
	})
	t.Run("corrupt pair, token gone", func(t *testing.T) {
		e := newEnv(t)
		if err := os.MkdirAll(e.cfg.CertDir, 0o700); err != nil {
			t.Fatal(err)
		}
		write(e, filepath.Join(e.cfg.CertDir, "kubelet-client-current.pem"), "garbage")
		e.cfg.BootstrapTokenFile = filepath.Join(e.dir, "none")
		err := e.run()
		var cfgErr *ConfigError
		if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "bootstrapTokenFile") {
			t.Fatalf("err = %v, want a ConfigError naming bootstrapTokenFile", err)
		}
	})
}
