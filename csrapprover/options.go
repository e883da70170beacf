package csrapprover

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/csrapprover/spent"
	"github.com/mooring-dev/mooring/internal/ticket"
	"github.com/mooring-dev/mooring/internal/trim"
)

// Flags are the approver's settings as flags; mooring-ccm registers them
// with the prefix "csr-approver-", mooring-csr-approver without.
type Flags struct {
	Workers                int
	DryRun                 bool
	MaxPendingPerRequester int
	MaxPending             int
	// MaxPendingPerInstance and MaxPendingAttestedPerRequester bound
	// attested joins (Options); 0: the defaults.
	MaxPendingPerInstance          int
	MaxPendingAttestedPerRequester int
	ReservedNames                  []string
	// ReserveAPIServerNames learns the names of the apiserver's serving
	// certificate (APIServerNames); the flag defaults to true, the zero
	// Flags of tests to false.
	ReserveAPIServerNames bool
	InstanceMaxAge        time.Duration
	MaxSANs               int
	MaxExpiration         time.Duration
	TicketKeysFile        string
	SpentTicketsNamespace string
	// TPM is the TPM policy (TPMOff, TPMPreferred, TPMRequired; "" is
	// TPMOff) and TPMPCRPolicy the PCR policy (tpm.ParsePCRPolicy).
	TPM          string
	TPMPCRPolicy string
}

// AddFlags registers the flags under prefix.
func (f *Flags) AddFlags(fs *pflag.FlagSet, prefix string) {
	fs.IntVar(&f.Workers, prefix+"workers", DefaultWorkers, "CSRs decided in parallel; each waits on its one write to the apiserver, so more workers keep the decisions up with a burst (docs/scale.md).")
	fs.BoolVar(&f.DryRun, prefix+"dry-run", false, "Log and record (Event DryRun) what would be decided; approve and deny nothing.")
	fs.IntVar(&f.MaxPendingPerRequester, prefix+"max-pending-per-requester", DefaultMaxPendingPerRequester, "Kubelet CSRs of one requester decided at once, counting those waiting to retry after a cloud or API error; further ones wait their turn (none is denied for being many). It bounds renewals, serving CSRs and joins whose evidence names no machine that can be read; attested joins are bounded by "+prefix+"max-pending-per-instance and "+prefix+"max-pending-attested-per-requester instead (docs/csrapprover.md).")
	fs.IntVar(&f.MaxPending, prefix+"max-pending", DefaultMaxPending, "Kubelet CSRs decided at once in all, counting those waiting to retry; further ones wait their turn.")
	fs.IntVar(&f.MaxPendingPerInstance, prefix+"max-pending-per-instance", DefaultMaxPendingPerInstance, "Attested joins (client CSRs whose evidence claims a machine: an instance id, a ticket's instance name) of one claimed machine decided at once; further ones wait their turn. The claim is read before the evidence is verified, so it only sorts joins.")
	fs.IntVar(&f.MaxPendingAttestedPerRequester, prefix+"max-pending-attested-per-requester", 0, "Attested joins of one requester decided at once, counting those waiting to retry: a boot wave's joins share one requester (its bootstrap token), and this share keeps one token's holder, who may claim any machines, from taking every place of "+prefix+"max-pending. 0: half of "+prefix+"max-pending.")
	fs.StringSliceVar(&f.ReservedNames, prefix+"reserved-names", nil, "DNS names and IPs no serving certificate may carry, besides the built-in cluster names (kubernetes, kubernetes.default..., localhost, *.svc, *.svc.*) and those of the apiserver's serving certificate: list other apiservers' names and addresses, and any the apiserver's certificate does not show.")
	fs.BoolVar(&f.ReserveAPIServerNames, prefix+"reserve-apiserver-names", true, "Reserve the DNS names and IPs of the apiserver's serving certificate, seen in a TLS handshake with the apiserver the approver talks to (at start, every minute, and kept for 24h after last seen): no serving certificate may carry them. No serving CSR is decided until the first handshake succeeds. false: for an apiserver reached without TLS or through a proxy; list its names in reserved-names instead.")
	fs.DurationVar(&f.InstanceMaxAge, prefix+"instance-max-age", 10*time.Second, "How old the cloud's record of an instance may be when a CSR is judged against it.")
	fs.IntVar(&f.MaxSANs, prefix+"max-sans", 16, "Most DNS and IP SANs a serving certificate may carry.")
	fs.StringVar(&f.TicketKeysFile, prefix+"ticket-keys-file", "", "The public keys (public-keys.json) of the join ticket keys Secret, mounted: joins may then present a join ticket instead of cloud-signed evidence, with any cloud (docs/tickets.md). Read again every 10s; unreadable keys hold decisions back. keys.json works too, but gives the approver the private keys. Empty: tickets are not accepted.")
	fs.StringVar(&f.SpentTicketsNamespace, prefix+"spent-tickets-namespace", DefaultSpentTicketsNamespace, "Namespace of the ConfigMaps "+spent.NamePrefix+"0 to -f, where the approver records each join ticket it approves as spent until the ticket expires (so it stays spent after kube-controller-manager deletes the CSR); used with --"+prefix+"ticket-keys-file. The approver needs get and update on those names there, and does not create them: the installer ships them (docs/tickets.md).")
	fs.StringVar(&f.TPM, prefix+"tpm", TPMOff, "Policy on TPM evidence in joins (a quote by the machine's TPM bound to the CSR key, after the cloud's evidence; docs/attestation.md): off (ignored: joins rest on the cloud's evidence or a join ticket alone), preferred (TPM evidence present must verify; a join without it goes on the cloud's evidence alone unless the cloud says the instance has a virtual TPM: then it is denied TPMEvidenceRequired), required (every join must prove itself with its TPM; refused at start on a cloud backend that verifies no TPM evidence).")
	fs.StringVar(&f.TPMPCRPolicy, prefix+"tpm-pcr-policy", "", "PCR values TPM evidence must show, as INDEX=HEX[|HEX...],... over the SHA-256 bank (say 7=<secure boot state digest>): each listed PCR must be quoted with one of its listed values, or the join is denied TPMPCRsOutsidePolicy. Empty: PCR values are not checked.")
	fs.DurationVar(&f.MaxExpiration, prefix+"max-expiration", 8760*time.Hour, "Longest spec.expirationSeconds a kubelet CSR may ask for; longer ones are denied (ExpirationTooLong). 0: no limit beyond the signer's --cluster-signing-duration.")
}

// DefaultSpentTicketsNamespace is where the spent join tickets are
// recorded unless the flag says otherwise: where the approver runs.
const DefaultSpentTicketsNamespace = "kube-system"

// NewFromCloud builds the controller over a cloud backend, with a CSR and a
// Node informer from factory (call before the factory starts), which store
// trimmed objects (internal/trim). restCfg is how client reaches the
// apiserver: with f.ReserveAPIServerNames, the names of its serving
// certificate are learned through it.
func NewFromCloud(client kubernetes.Interface, restCfg *rest.Config, factory informers.SharedInformerFactory, a cloud.Attester, f Flags) (*Controller, error) {
	var err error
	cfg := Config{
		Cluster: a.ClusterTag(), InstanceMaxAge: f.InstanceMaxAge,
		MaxSANs: f.MaxSANs, ReservedNames: f.ReservedNames, MaxExpiration: f.MaxExpiration,
	}
	if f.ReserveAPIServerNames {
		if restCfg == nil {
			return nil, errors.New("reserve-apiserver-names needs the apiserver's client configuration")
		}
		names, err := NewAPIServerNames(restCfg)
		if err != nil {
			return nil, err
		}
		cfg.APIServerNames = names
	}
	if cfg.TPM, err = tpmPolicy(a, f, true); err != nil {
		return nil, err
	}
	verifiers := a.EvidenceVerifiers()
	var spentTickets *spent.Store
	if f.TicketKeysFile != "" {
		ns := f.SpentTicketsNamespace
		if ns == "" {
			ns = DefaultSpentTicketsNamespace
		}
		spentTickets = spent.New(client.CoreV1(), ns, TicketClockSkew)
		keys := &ticket.KeyFile{Path: f.TicketKeysFile}
		if _, err := keys.Keys(); err != nil {
			return nil, err
		}
		if data, err := os.ReadFile(f.TicketKeysFile); err == nil && ticket.HoldsPrivateKeys(data) {
			klog.InfoS("The ticket keys file holds private keys, which the approver does not need: mount the Secret's "+ticket.PublicKeysFile+" instead (docs/tickets.md)",
				"file", f.TicketKeysFile)
		}
		verifiers = append(verifiers, NewTicketVerifier(keys, a.ClusterTag()))
	}
	if len(verifiers) == 0 {
		// A cloud that signs no identity (DigitalOcean, say) joins with
		// tickets only; without their keys a join can only be denied.
		klog.InfoS("No evidence is accepted: the cloud signs no instance identity and no ticket keys file is set, so every join is denied (renewals and serving certificates are still decided)",
			"cluster", a.ClusterTag())
	}
	csrs, nodes := factory.Certificates().V1().CertificateSigningRequests(), factory.Core().V1().Nodes()
	for _, inf := range []cache.SharedIndexInformer{csrs.Informer(), nodes.Informer()} {
		if err := trim.Informer(inf); err != nil {
			return nil, err
		}
	}
	// Patient lookups: joins whose instances the view has not listed yet
	// wait on its next List together.
	return New(client, csrs, nodes, cfg, verifiers, a.InstanceView().Patient(),
		Options{Workers: f.Workers, DryRun: f.DryRun, MaxPendingPerRequester: f.MaxPendingPerRequester, MaxPending: f.MaxPending,
			MaxPendingPerInstance: f.MaxPendingPerInstance, MaxPendingAttestedPerRequester: f.MaxPendingAttestedPerRequester,
			SpentTickets: spentTickets})
}

// Validate checks the flags against the cloud backend as NewFromCloud
// will, so that a command can refuse them at start, before it leads.
func (f Flags) Validate(a cloud.Attester) error {
	_, err := tpmPolicy(a, f, false)
	return err
}

// tpmPolicy reads the TPM flags against the backend: required on a backend
// that verifies no TPM evidence is refused, as is a PCR policy that no
// check would apply.
func tpmPolicy(a cloud.Attester, f Flags, logIt bool) (TPMPolicy, error) {
	mode, err := ParseTPMMode(f.TPM)
	if err != nil {
		return TPMPolicy{}, err
	}
	pcrs, err := tpm.ParsePCRPolicy(f.TPMPCRPolicy)
	if err != nil {
		return TPMPolicy{}, err
	}
	v, _ := a.(cloud.TPMVerifier)
	backend := fmt.Sprintf("%T", a)
	if n, ok := a.(interface{ ProviderName() string }); ok {
		backend = n.ProviderName()
	}
	switch {
	case mode == TPMRequired && v == nil:
		return TPMPolicy{}, fmt.Errorf("TPM policy %s (--tpm, in mooring-ccm --csr-approver-tpm): the cloud backend %s verifies no TPM evidence, so every join would be denied; use %s or %s", TPMRequired, backend, TPMPreferred, TPMOff)
	case pcrs != nil && mode == TPMOff:
		return TPMPolicy{}, fmt.Errorf("a TPM PCR policy (tpm-pcr-policy) is set with the TPM policy %s, which checks no TPM evidence", TPMOff)
	case pcrs != nil && v == nil:
		return TPMPolicy{}, fmt.Errorf("a TPM PCR policy (tpm-pcr-policy) is set, and the cloud backend %s verifies no TPM evidence", backend)
	}
	if logIt && v != nil && mode != TPMOff {
		klog.InfoS("Joins may prove themselves with the machine's TPM", "tpmPolicy", mode, "pcrPolicy", f.TPMPCRPolicy != "")
	}
	return TPMPolicy{Mode: mode, Verifier: v, Quote: tpm.QuoteOptions{Policy: pcrs}}, nil
}
