package agent

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/tpm/wire"
	"github.com/mooring-dev/mooring/internal/atomicfile"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/systemd"
)

// Starter starts a systemd unit without waiting for it.
type Starter interface {
	Start(ctx context.Context, unit string) error
}

// DeniedError is the approver's verdict on this node's CSR.
type DeniedError struct {
	CSR, Reason, Message string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("certificate request %s was denied: %s: %s", e.CSR, e.Reason, e.Message)
}

// Final reports whether the denial ends the join (internal/csrreason's
// table); a denial that is not final is retried with a fresh key.
func (e *DeniedError) Final() bool { return csrreason.Final(e.Reason) }

// Files the agent keeps in the cert dir, named as the kubelet names them.
const (
	pairPrefix = "kubelet-client"
	keyTmp     = "kubelet-client.key.tmp"
)

// Agent takes a node from a fresh boot to a kubelet with approved
// credentials. Every step can be interrupted and resumed.
type Agent struct {
	Config Config
	// Identity is the machine's cloud (a backend's, nodeid.New).
	Identity nodeid.Identity
	Notifier systemd.Notifier
	// Units starts the kubelet; nil: the agent does not start it.
	Units Starter
	// NewClient makes the bootstrap client; default: NewClientForConfig.
	NewClient func(server string, caPEM []byte, token string) (Client, error)
	// NewNodeClient makes a client with the kubelet's credentials (the
	// kubeconfig the agent wrote); default: NewClientForConfig.
	NewNodeClient func(kubeconfig string) (Client, error)
	// Backoff paces retries of the metadata service and the apiserver.
	Backoff wait.Backoff
	// DenialBackoff paces new joins after a denial that is not final.
	DenialBackoff wait.Backoff
	// Now is the clock (default time.Now).
	Now func() time.Time

	// tpm is the attestation key whose quote the join adds, when the tpm
	// setting, the backend and the machine's TPM allow (resolveTPM); nil:
	// the cloud's evidence alone.
	tpm *node.Key
}

func (a *Agent) defaults() {
	if a.NewClient == nil {
		a.NewClient = func(server string, caPEM []byte, token string) (Client, error) {
			return NewClientForConfig(&rest.Config{
				Host: server, BearerToken: token, UserAgent: "mooring-agent",
				TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
			})
		}
	}
	if a.NewNodeClient == nil {
		a.NewNodeClient = newNodeClient
	}
	if a.Backoff.Steps == 0 {
		a.Backoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	}
	if a.DenialBackoff.Steps == 0 {
		a.DenialBackoff = wait.Backoff{Duration: 15 * time.Second, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Minute}
	}
	if a.Now == nil {
		a.Now = time.Now
	}
}

func (a *Agent) status(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	klog.InfoS("Status", "status", msg)
	if err := a.Notifier.Status("%s", msg); err != nil {
		klog.ErrorS(err, "sd_notify")
	}
}

// retry runs f with backoff until it succeeds or ctx ends; STATUS says
// what is being retried and why. A denial, a configuration error
// (ConfigError), or an error f marks as permanent (permanentError), ends it
// at once.
func (a *Agent) retry(ctx context.Context, what string, f func() error) error {
	b := a.Backoff
	for {
		err := f()
		if err == nil {
			return nil
		}
		var (
			denied    *DeniedError
			badConfig *ConfigError
		)
		if errors.As(err, &denied) || errors.As(err, &badConfig) {
			return err
		}
		var permanent *permanentError
		if errors.As(err, &permanent) {
			return permanent.err
		}
		d := b.Step()
		a.status("%s failed, retrying in %v: %v", what, d.Round(time.Millisecond), err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(d):
		}
	}
}

// Run does the whole job: credentials in place, kubelet settings written,
// READY=1 sent, kubelet started.
func (a *Agent) Run(ctx context.Context) error {
	a.defaults()
	cfg := a.Config
	if err := a.checkFiles(); err != nil {
		return err
	}
	a.status("reading the instance metadata")
	var inst nodeid.Instance
	if err := a.retry(ctx, "instance metadata", func() (err error) { inst, err = a.Identity.Instance(ctx); return err }); err != nil {
		return err
	}
	nodeName := inst.NodeName
	if nodeName == "" {
		return fmt.Errorf("the %s metadata gives instance %s no node name under node name policy %q", cfg.Cloud, inst.ID, cfg.NodeNamePolicy)
	}
	var ca []byte
	if err := a.retry(ctx, "cluster CA", func() (err error) { ca, err = clusterCA(ctx, cfg); return err }); err != nil {
		return err
	}
	current := filepath.Join(cfg.CertDir, pairPrefix+"-current.pem")
	if err := validCredentials(current, ca, nodeName, a.Now()); err != nil {
		klog.InfoS("No usable kubelet credentials; joining", "node", nodeName, "reason", err)
		if a.tpm, err = a.resolveTPM(); err != nil {
			return err
		}
		if err := a.joinUntilDecided(ctx, inst, nodeName, ca); err != nil {
			return err
		}
	} else {
		klog.InfoS("Kubelet credentials are valid; skipping the join", "node", nodeName, "file", current)
	}
	// A write that fails (disk full) is retried: nothing is lost by
	// waiting, and STATUS says what is in the way.
	if err := a.retry(ctx, "write "+cfg.Kubeconfig, func() error { return writeKubeconfig(cfg.Kubeconfig, cfg.APIServer, ca, current) }); err != nil {
		return err
	}
	if err := a.retry(ctx, "write "+cfg.KubeletEnvFile, func() error { return writeKubeletEnv(cfg.KubeletEnvFile, inst, addressIsLocal) }); err != nil {
		return err
	}
	if err := a.writeKubeletConfig(ctx, ca); err != nil {
		return err
	}
	a.status("credentials in place for node %s; starting the kubelet", nodeName)
	if err := a.Notifier.Ready(); err != nil {
		klog.ErrorS(err, "sd_notify READY")
	}
	if a.Units != nil && cfg.KubeletUnit != "" {
		if err := a.retry(ctx, "start "+cfg.KubeletUnit, func() error { return a.Units.Start(ctx, cfg.KubeletUnit) }); err != nil {
			return err
		}
	}
	a.status("node %s joined; %s started", nodeName, cfg.KubeletUnit)
	return nil
}

// joinUntilDecided joins; after a denial that is not final (the evidence
// expired while the approver was down, the cloud still said pending, ...)
// it drops the key and joins again with a fresh one, after a backoff.
func (a *Agent) joinUntilDecided(ctx context.Context, inst nodeid.Instance, nodeName string, ca []byte) error {
	b := a.DenialBackoff
	for {
		err := a.join(ctx, inst, nodeName, ca)
		var denied *DeniedError
		if !errors.As(err, &denied) || denied.Final() {
			return err
		}
		if a.Config.JoinTicketFile != "" {
			// The denied request holds the ticket (single use): asking
			// again with it is a replay. A new ticket is needed.
			return fmt.Errorf("%w; a join ticket is used once: issue a new one for this instance", err)
		}
		if err := os.Remove(filepath.Join(a.Config.CertDir, keyTmp)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		d := b.Step()
		klog.InfoS("The join was denied for a reason that can pass; joining again with a fresh key", "csr", denied.CSR,
			"reason", denied.Reason, "why", csrreason.WhyRetry(denied.Reason), "after", d.Round(time.Millisecond))
		a.status("certificate request %s denied (%s: %s); joining again with a fresh key in %v", denied.CSR, denied.Reason, denied.Message, d.Round(time.Second))
		select {
		case <-ctx.Done():
			return fmt.Errorf("join: %w (last denial: %v)", ctx.Err(), denied)
		case <-time.After(d):
		}
	}
}

// join gets an approved client certificate through the CSR API.
func (a *Agent) join(ctx context.Context, inst nodeid.Instance, nodeName string, ca []byte) error {
	cfg := a.Config
	keyPath := filepath.Join(cfg.CertDir, keyTmp)
	var (
		keyPEM []byte
		key    crypto.Signer
	)
	if err := a.retry(ctx, "write the CSR key", func() (err error) { keyPEM, key, err = loadOrCreateKey(keyPath); return err }); err != nil {
		return err
	}
	tokenID, tokenSecret, err := readBootstrapToken(cfg.BootstrapTokenFile)
	if err != nil {
		return err
	}
	client, err := a.NewClient(cfg.APIServer, ca, tokenID+"."+tokenSecret)
	if err != nil {
		return err
	}
	base, err := CSRName(nodeName, key.Public())
	if err != nil {
		return err
	}
	var (
		certPEM []byte
		// answer is the TPM's answer to the approver's credential
		// activation challenge on the CSR of the round before.
		answer *wire.Activation
		round  int
	)
	for {
		name := roundName(base, round)
		reqName, reqUID, err := a.file(ctx, client, name, nodeName, key, answer)
		if err == nil {
			a.status("waiting for the approval of certificate request %s (node %s, instance %s)", reqName, nodeName, inst.ID)
			certPEM, err = a.waitIssued(ctx, client, reqName, reqUID)
			if errors.Is(err, errCSRGone) {
				klog.InfoS("The certificate request is gone before it was decided; filing it again", "csr", reqName)
				continue
			}
			if err == nil {
				break
			}
		}
		var denied *DeniedError
		if a.tpm == nil || !errors.As(err, &denied) || denied.Reason != csrreason.TPMChallenge {
			return err
		}
		// The approver asks the TPM to prove that it holds the AK (and the
		// EK the cloud vouches for): the answer goes with the same key,
		// fresh evidence, in the next round's CSR.
		if round+1 >= MaxTPMRounds {
			return fmt.Errorf("the approver asked the TPM for credential activation %d times for this key; giving up (last: %v)", MaxTPMRounds, denied)
		}
		if answer, err = a.activate(ctx, client, denied.CSR); err != nil {
			return err
		}
		round++
		klog.InfoS("Answering the approver's credential activation challenge with a new certificate request", "challengedCSR", denied.CSR,
			"csr", roundName(base, round), "round", round+1)
	}
	// Disk full, a read-only remount: the certificate is kept in memory and
	// the write retried; a crash before it lands leaves the old files, and
	// the next run finds the approved CSR again by its name.
	if err := a.retry(ctx, "write the kubelet credentials", func() error {
		return storePair(cfg.CertDir, certPEM, keyPEM, a.Now())
	}); err != nil {
		return err
	}
	if err := os.Remove(keyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	klog.InfoS("Kubelet client certificate issued", "node", nodeName, "file", filepath.Join(cfg.CertDir, pairPrefix+"-current.pem"))
	return nil
}

// MaxTPMRounds bounds the CSRs of one key in a join with a TPM: the first,
// and the answers to the approver's credential activation challenges (one
// is enough; an approver that restarted in between asks again).
const MaxTPMRounds = 3

// roundName is the name of the CSR of a join's round: base (CSRName) for
// the first, base-tpmN for the Nth answer to a credential activation
// challenge. A run resumed after a kill finds them by these names.
func roundName(base string, round int) string {
	if round == 0 {
		return base
	}
	return base + "-tpm" + strconv.Itoa(round)
}

// file files the CSR of the key (named name) with fresh evidence (and a
// TPM quote carrying answer, when the join uses the TPM), or finds the one
// an earlier run filed; it retries until the apiserver answers.
func (a *Agent) file(ctx context.Context, client Client, name, nodeName string, key crypto.Signer, answer *wire.Activation) (reqName string, reqUID types.UID, err error) {
	err = a.retry(ctx, "certificate request", func() error {
		// A CSR of this key filed by an earlier run is found by its name.
		if existing, err := client.CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{}); err == nil {
			if d := deniedCondition(existing); d != nil {
				return &DeniedError{CSR: name, Reason: d.Reason, Message: d.Message}
			}
		}
		request, err := joinRequest(ctx, func(ctx context.Context, binding string) ([]evidence.Block, error) {
			return a.evidenceBlocks(ctx, binding, answer)
		}, nodeName, key)
		if err != nil {
			return err
		}
		reqName, reqUID, err = requestCertificate(ctx, client.CertificateSigningRequests(), request, name,
			certificatesv1.KubeAPIServerClientKubeletSignerName,
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
		return err
	})
	return reqName, reqUID, err
}

// JoinRequest is the spec.request of a join: the kubelet client CSR of key
// for nodeName (CN system:node:NAME, O system:nodes), followed by the
// machine's evidence bound to key (internal/evidence), fresh from identity.
// name is the CSR's name (CSRName). The agent files what it returns; so do
// the benchmarks, which stand in for thousands of agents.
func JoinRequest(ctx context.Context, identity Evidencer, nodeName string, key crypto.Signer) (name string, request []byte, err error) {
	name, err = CSRName(nodeName, key.Public())
	if err != nil {
		return "", nil, err
	}
	request, err = joinRequest(ctx, func(ctx context.Context, binding string) ([]evidence.Block, error) {
		b, err := identity.Evidence(ctx, binding)
		return []evidence.Block{b}, err
	}, nodeName, key)
	return name, request, err
}

// joinRequest is JoinRequest's spec.request with the evidence blocks
// blocks gives for the key's binding.
func joinRequest(ctx context.Context, blocks func(ctx context.Context, binding string) ([]evidence.Block, error), nodeName string, key crypto.Signer) ([]byte, error) {
	binding, err := evidence.Binding(key.Public())
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	bs, err := blocks(ctx, binding)
	if err != nil {
		return nil, fmt.Errorf("evidence: %w", err)
	}
	return evidence.Encode(der, bs...)
}

// Evidencer gives evidence bound to a binding value (the CSR key's,
// internal/evidence.Binding): a nodeid.Identity does.
type Evidencer interface {
	Evidence(ctx context.Context, binding string) (evidence.Block, error)
}

// EvidenceFunc is a function as an Evidencer.
type EvidenceFunc func(ctx context.Context, binding string) (evidence.Block, error)

// Evidence calls f.
func (f EvidenceFunc) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	return f(ctx, binding)
}

// errCSRGone: the CSR was deleted (or replaced) before it was decided.
var errCSRGone = errors.New("the certificate request is gone")

// waitIssued waits until the CSR is decided and, if approved, signed, for
// as long as ctx allows. One watch lasts at most WaitTimeout; a watch that
// ends undecided (its time is up, the apiserver went away, etcd lost the
// watch) is followed by a look at the CSR and a new watch, so an apiserver
// outage costs a wait, never the join. A denial is a *DeniedError; a CSR
// that no longer exists is errCSRGone.
func (a *Agent) waitIssued(ctx context.Context, client Client, name string, uid types.UID) ([]byte, error) {
	b := a.Backoff
	since := a.Now()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, a.Config.WaitTimeout.Duration)
		certPEM, err := waitForCertificate(waitCtx, client, name, uid)
		cancel()
		if err == nil {
			return certPEM, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("certificate request %s: %w (last error: %v)", name, ctx.Err(), err)
		}
		got, gerr := client.CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr), gerr == nil && got.UID != uid:
			return nil, errCSRGone
		case gerr == nil:
			if d := deniedCondition(got); d != nil {
				return nil, &DeniedError{CSR: name, Reason: d.Reason, Message: d.Message}
			}
		default:
			err = gerr
		}
		d := b.Step()
		a.status("certificate request %s undecided after %v (%v); watching it again in %v", name,
			a.Now().Sub(since).Round(time.Second), err, d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("certificate request %s: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(d):
		}
	}
}

// storePair writes the kubelet's client certificate and key as one file
// (kubelet-client-<time>.pem, written atomically) and points
// kubelet-client-current.pem at it with an atomic rename of a symlink, the
// layout of the kubelet's own certificate store. A failure at any step
// leaves the previous current pair as it was and no torn file.
func storePair(dir string, certPEM, keyPEM []byte, now time.Time) error {
	var pair []byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			pair = append(pair, pem.EncodeToMemory(b)...)
		}
	}
	key, _ := pem.Decode(keyPEM)
	if len(pair) == 0 || key == nil {
		return &permanentError{errors.New("the issued certificate or the key holds no PEM block")}
	}
	pair = append(pair, pem.EncodeToMemory(key)...)
	path := filepath.Join(dir, pairPrefix+"-"+now.UTC().Format("2006-01-02-15-04-05")+".pem")
	if err := atomicfile.Write(path, pair, 0o600); err != nil {
		return err
	}
	// The store keeps -current.pem as a symlink to the newest pair; a plain
	// file there (unusable, or we would not be joining) is in its way.
	current := filepath.Join(dir, pairPrefix+"-current.pem")
	if st, err := os.Lstat(current); err == nil && st.Mode()&os.ModeSymlink == 0 {
		if err := os.Remove(current); err != nil {
			return err
		}
	}
	link := filepath.Join(dir, "."+pairPrefix+"-current.pem.tmp")
	_ = os.Remove(link)
	if err := os.Symlink(path, link); err != nil {
		return err
	}
	if err := os.Rename(link, current); err != nil {
		_ = os.Remove(link)
		return err
	}
	return atomicfile.SyncDir(dir)
}

// evidence is what the join presents (JoinRequest wraps its errors): the
// join ticket when one is configured, else evidence the cloud signs for the
// CSR key's binding.
func (a *Agent) evidence(ctx context.Context, binding string) (evidence.Block, error) {
	if path := a.Config.JoinTicketFile; path != "" {
		a.status("presenting the join ticket of %s", path)
		tok, err := readTicket(path)
		if err != nil {
			return evidence.Block{}, err
		}
		return evidence.Block{Type: ticket.BlockType, Data: tok}, nil
	}
	a.status("asking the metadata service for evidence bound to the CSR key")
	block, err := a.Identity.Evidence(ctx, binding)
	if errors.Is(err, nodeid.ErrNoEvidence) {
		return block, configErrorf("%w: give the agent a join ticket (joinTicketFile, docs/tickets.md)", err)
	}
	return block, err
}

// evidenceBlocks is the join's evidence (evidence), followed by the TPM's
// quote for the same binding when the join uses the TPM, carrying answer
// (the answer to a credential activation challenge, or nil).
func (a *Agent) evidenceBlocks(ctx context.Context, binding string, answer *wire.Activation) ([]evidence.Block, error) {
	first, err := a.evidence(ctx, binding)
	if err != nil {
		return nil, err
	}
	if a.tpm == nil {
		return []evidence.Block{first}, nil
	}
	dev := a.Config.TPMDevice
	a.status("asking the TPM at %s for a quote bound to the CSR key", dev)
	rw, err := node.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("TPM: %w", err)
	}
	defer rw.Close()
	quote, err := node.Quote(rw, *a.tpm, binding, a.Now(), answer)
	if err != nil {
		return nil, fmt.Errorf("TPM at %s: %w", dev, err)
	}
	return []evidence.Block{first, quote}, nil
}

// resolveTPM decides, once for a join, whether it adds the TPM's quote
// (Config.TPM): under auto when the backend names a TPM key
// (nodeid.TPMKeyer) and tpmDevice exists; under required the same, and a
// ConfigError when either is missing; never under off.
func (a *Agent) resolveTPM() (*node.Key, error) {
	cfg := a.Config
	if cfg.TPM == TPMOff {
		return nil, nil
	}
	required := cfg.TPM == TPMRequired
	keyer, ok := a.Identity.(nodeid.TPMKeyer)
	if !ok {
		if required {
			return nil, configErrorf("tpm: required, but the %s backend proves no join with a TPM (it names no attestation key; docs/attestation.md)", cfg.Cloud)
		}
		klog.V(2).InfoS("The backend names no TPM key; the join presents the cloud's evidence alone", "cloud", cfg.Cloud)
		return nil, nil
	}
	_, err := os.Stat(cfg.TPMDevice)
	switch {
	case errors.Is(err, fs.ErrNotExist) && required:
		return nil, configErrorf("tpm: required, but there is no TPM at %s (tpmDevice): %w", cfg.TPMDevice, wire.ErrNoTPM)
	case errors.Is(err, fs.ErrNotExist):
		klog.InfoS("No TPM on this machine; the join presents the cloud's evidence alone", "tpmDevice", cfg.TPMDevice, "tpm", cfg.TPM)
		return nil, nil
	case err != nil:
		return nil, configErrorf("tpmDevice: %w", err)
	}
	k := keyer.TPMKey()
	if k.Load == nil {
		return nil, fmt.Errorf("the %s backend names a TPM key without a way to load it", cfg.Cloud)
	}
	klog.InfoS("The join adds a quote by the machine's TPM", "tpmDevice", cfg.TPMDevice, "tpm", cfg.TPM, "endorsementKey", k.WithEK)
	return &k, nil
}

// activate answers the credential activation challenge the approver wrote
// on the CSR name (its annotation) with the TPM: the answer names that CSR
// and its UID. A challenge that is missing, malformed, or that this TPM
// cannot activate ends the join with an error (a TPM that cannot be opened
// is retried).
func (a *Agent) activate(ctx context.Context, client Client, name string) (*wire.Activation, error) {
	var answer *wire.Activation
	err := a.retry(ctx, "answer the TPM challenge of "+name, func() error {
		csr, err := client.CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v, ok := csr.Annotations[wire.ChallengeAnnotation]
		if !ok {
			return &permanentError{fmt.Errorf("certificate request %s was denied with %s but carries no %s annotation", name, csrreason.TPMChallenge, wire.ChallengeAnnotation)}
		}
		challenge, err := wire.DecodeAnnotation(v)
		if err != nil {
			return &permanentError{fmt.Errorf("certificate request %s: %w", name, err)}
		}
		rw, err := node.Open(a.Config.TPMDevice)
		if err != nil {
			return fmt.Errorf("TPM: %w", err)
		}
		defer rw.Close()
		a.status("activating the credential the approver sealed to this TPM (certificate request %s)", name)
		secret, err := node.Activate(rw, *a.tpm, challenge)
		if err != nil {
			return &permanentError{fmt.Errorf("the TPM at %s cannot answer the credential activation challenge of certificate request %s: %w", a.Config.TPMDevice, name, err)}
		}
		answer = &wire.Activation{ChallengeCSR: name, ChallengeUID: string(csr.UID), Secret: secret}
		return nil
	})
	return answer, err
}

// readTicket reads the join ticket joinTicketFile names; a file that
// cannot be read or is empty is a ConfigError.
func readTicket(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, configErrorf("joinTicketFile: %w", err)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) == 0 {
		return nil, configErrorf("joinTicketFile: %s is empty", path)
	}
	return tok, nil
}

// checkFiles reads, before anything else, the files the config names that
// this run needs: the CA bundle (caFile) on every run; the bootstrap token
// when it discovers the CA (caCertHash) or will join; the join ticket when
// it will join, which a cloud that signs nothing (nodeid.NeedsTicket)
// requires. A run joins when certDir holds no kubelet-client-current.pem
// yet. So a missing or malformed file stops the agent at once with a
// ConfigError, even while the metadata service or the apiserver cannot be
// reached. (A pair that exists but turns out unusable leads to a join too;
// the join reads the token and the ticket again, with the same errors.)
func (a *Agent) checkFiles() error {
	cfg := a.Config
	if cfg.CAFile != "" {
		if _, err := readCAFile(cfg.CAFile); err != nil {
			return err
		}
	}
	_, err := os.Lstat(filepath.Join(cfg.CertDir, pairPrefix+"-current.pem"))
	joining := errors.Is(err, os.ErrNotExist)
	if cfg.CACertHash != "" || joining {
		if _, _, err := readBootstrapToken(cfg.BootstrapTokenFile); err != nil {
			return err
		}
	}
	switch {
	case joining && cfg.JoinTicketFile != "":
		if _, err := readTicket(cfg.JoinTicketFile); err != nil {
			return err
		}
	case joining && a.Identity != nil && nodeid.NeedsTicket(a.Identity):
		return configErrorf("joinTicketFile: required to join on the %s cloud, which signs no instance identity (docs/tickets.md)", cfg.Cloud)
	}
	return nil
}

// CSRName is the CSR's name for a node's key: a retry with the same key
// finds the CSR filed before.
func CSRName(nodeName string, pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("CSR name: %w", err)
	}
	sum := sha256.Sum256(der)
	return "mooring-" + nodeName + "-" + hex.EncodeToString(sum[:8]), nil
}

func deniedCondition(c *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequestCondition {
	for i := range c.Status.Conditions {
		if t := c.Status.Conditions[i].Type; t == certificatesv1.CertificateDenied || t == certificatesv1.CertificateFailed {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// loadOrCreateKey reuses the key an interrupted run left, or makes one.
func loadOrCreateKey(path string) ([]byte, crypto.Signer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, err
	}
	if data, err := os.ReadFile(path); err == nil {
		if k, err := keyutil.ParsePrivateKeyPEM(data); err == nil {
			if s, ok := k.(crypto.Signer); ok {
				return data, s, nil
			}
		}
		klog.InfoS("Discarding an unreadable key from an earlier run", "file", path)
	}
	data, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	k, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, nil, err
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return nil, nil, err
	}
	return data, k.(crypto.Signer), nil
}

// validCredentials checks the kubelet's current pair: it parses, the key
// matches, it chains to the cluster CA, names the node and is not expired.
func validCredentials(path string, caPEM []byte, nodeName string, now time.Time) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var certBlock *pem.Block
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" && certBlock == nil {
			certBlock = b
		}
	}
	if certBlock == nil {
		return errors.New("no certificate in " + path)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return err
	}
	key, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return errors.New("the key does not match the certificate")
	}
	if cert.Subject.CommonName != "system:node:"+nodeName {
		return fmt.Errorf("the certificate is for %q, not node %s", cert.Subject.CommonName, nodeName)
	}
	if now.After(cert.NotAfter.Add(-time.Minute)) {
		return fmt.Errorf("the certificate expired at %s", cert.NotAfter.Format(time.RFC3339))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificates")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the certificate does not chain to the cluster CA: %w", err)
	}
	return nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// addressIsLocal reports whether ip is an address of one of this machine's
// interfaces (on Linux every address of the loopback network is).
func addressIsLocal(ip string) bool {
	want := net.ParseIP(ip)
	if want == nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && (n.IP.Equal(want) || (n.IP.IsLoopback() && n.Contains(want))) {
			return true
		}
	}
	return false
}
