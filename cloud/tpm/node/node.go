// Package node is the node agent's half of TPM-rooted identity: it opens
// the machine's TPM (a device such as /dev/tpmrm0, or a TPM simulator's
// Unix socket), loads the attestation key the backend names, and makes the
// evidence (cloud/wire.Evidence) for a CSR key's binding: a quote over the
// SHA-256 PCR bank whose qualifying data is wire.Nonce(binding, now). It
// also answers the approver's credential activation challenge. It uses
// go-tpm-tools' client and go-tpm; it links no simulator.
package node

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/mooring-dev/mooring/cloud/tpm/wire"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// DefaultDevice is the kernel's TPM resource manager device.
const DefaultDevice = "/dev/tpmrm0"

// Open opens the TPM at path: a character device, or the Unix socket of a
// TPM simulator (go-tpm's tpmutil.OpenTPM: one command per connection). A
// path that does not exist wraps wire.ErrNoTPM.
func Open(path string) (io.ReadWriteCloser, error) {
	if path == "" {
		path = DefaultDevice
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", wire.ErrNoTPM, path)
	}
	rw, err := tpmutil.OpenTPM(path)
	if err != nil {
		return nil, fmt.Errorf("open the TPM at %s: %w", path, err)
	}
	return rw, nil
}

// Key says which attestation key a backend's machines use and what goes
// with it.
type Key struct {
	// Load loads the AK (say client.GceAttestationKeyRSA, whose template
	// and certificate the cloud provisioned in NV; or
	// client.AttestationKeyRSA, the TCG default AK under the endorsement
	// hierarchy). Its certificate, when it has one, goes into the evidence.
	Load func(rw io.ReadWriter) (*client.Key, error)
	// WithEK adds the RSA endorsement key's public area (and its
	// certificate from NV, when there is one) for backends that prove the
	// AK by credential activation.
	WithEK bool
}

// GCEKey is the AK GCE provisions in Shielded VMs' vTPMs: its template and
// certificate in NV (0x01c10001, 0x01c10000), under the endorsement
// hierarchy.
var GCEKey = Key{Load: client.GceAttestationKeyRSA}

// DefaultKey is the TCG default RSA AK under the endorsement hierarchy,
// with the EK, for credential activation.
var DefaultKey = Key{Load: client.AttestationKeyRSA, WithEK: true}

// Quote makes the evidence block for binding at now with the TPM rw.
func Quote(rw io.ReadWriter, k Key, binding string, now time.Time, answer *wire.Activation) (evidence.Block, error) {
	ak, err := k.Load(rw)
	if err != nil {
		return evidence.Block{}, fmt.Errorf("load the attestation key: %w", err)
	}
	defer ak.Close()
	akPub, err := ak.PublicArea().Encode()
	if err != nil {
		return evidence.Block{}, fmt.Errorf("attestation key: %w", err)
	}
	e := wire.Evidence{Version: wire.Version, Time: now.Unix(), AKPublic: akPub, Activation: answer}
	if c := ak.Cert(); c != nil {
		e.AKCert = c.Raw
	}
	if k.WithEK {
		ek, err := client.EndorsementKeyRSA(rw)
		if err != nil {
			return evidence.Block{}, fmt.Errorf("load the endorsement key: %w", err)
		}
		e.EKPublic, err = ek.PublicArea().Encode()
		if c := ek.Cert(); c != nil {
			e.EKCert = c.Raw
		}
		ek.Close()
		if err != nil {
			return evidence.Block{}, fmt.Errorf("endorsement key: %w", err)
		}
	}
	q, err := ak.Quote(client.FullPcrSel(tpm2.AlgSHA256), wire.Nonce(binding, time.Unix(e.Time, 0)))
	if err != nil {
		return evidence.Block{}, fmt.Errorf("quote: %w", err)
	}
	e.Quote, e.Signature = q.GetQuote(), q.GetRawSig()
	e.PCRHash = uint16(q.GetPcrs().GetHash())
	e.PCRs = q.GetPcrs().GetPcrs()
	data, err := e.Marshal()
	if err != nil {
		return evidence.Block{}, err
	}
	return evidence.Block{Type: wire.EvidenceType, Data: data}, nil
}
