package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// The agent files its CSR and waits for its certificate as client-go's
// util/certificate/csr does (RequestCertificateWithContext,
// WaitForCertificate), over the agent's Client instead of a clientset:
// that package takes a clientset, which links every API group. Unlike it,
// it knows certificates.k8s.io/v1 only (GA since Kubernetes 1.19, the only
// version since 1.22), with no fallback to v1beta1.

// requestCertificate files a CSR of csrPEM (a PEM CERTIFICATE REQUEST)
// named name for signerName and usages. When a CSR of that name exists
// already, it is reused if it asks for the same subject and signer with the
// same key and holds no expired certificate. It returns the CSR's name and
// UID.
func requestCertificate(ctx context.Context, client CSRClient, csrPEM []byte, name, signerName string, usages []certificatesv1.KeyUsage, key crypto.Signer) (string, types.UID, error) {
	req := &certificatesv1.CertificateSigningRequest{
		TypeMeta:   metav1.TypeMeta{Kind: "CertificateSigningRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrPEM, Usages: usages, SignerName: signerName},
	}
	created, err := client.Create(ctx, req, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.V(2).InfoS("Certificate signing request created", "csr", created.Name)
		return created.Name, created.UID, nil
	case apierrors.IsAlreadyExists(err):
		klog.InfoS("The certificate signing request exists already; reusing it", "csr", name)
		existing, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", "", withMessage("cannot retrieve certificate signing request: %v", err)
		}
		if err := compatible(existing, req, key); err != nil {
			return "", "", fmt.Errorf("retrieved csr is not compatible: %w", err)
		}
		klog.InfoS("The existing certificate signing request is still valid", "csr", name)
		return existing.Name, existing.UID, nil
	}
	return "", "", withMessage("cannot create certificate signing request: %v", err)
}

// compatible reports why an existing CSR cannot stand for the one the
// agent would file (nil if it can): another subject or signer, a request
// not signed by key, or an issued certificate that has expired.
func compatible(existing, want *certificatesv1.CertificateSigningRequest, key crypto.Signer) error {
	got, err := parseCSRPEM(existing.Spec.Request)
	if err != nil {
		return fmt.Errorf("unable to parse new csr: %w", err)
	}
	orig, err := parseCSRPEM(want.Spec.Request)
	if err != nil {
		return fmt.Errorf("unable to parse original csr: %w", err)
	}
	if !reflect.DeepEqual(got.Subject, orig.Subject) {
		return fmt.Errorf("csr subjects differ: new: %#v, orig: %#v", got.Subject, orig.Subject)
	}
	if existing.Spec.SignerName != "" && want.Spec.SignerName != "" && existing.Spec.SignerName != want.Spec.SignerName {
		return fmt.Errorf("csr signerNames differ: new %q, orig: %q", existing.Spec.SignerName, want.Spec.SignerName)
	}
	got.PublicKey = key.Public()
	if err := got.CheckSignature(); err != nil {
		return fmt.Errorf("error validating signature new CSR against old key: %w", err)
	}
	if len(existing.Status.Certificate) > 0 {
		certs, err := certutil.ParseCertsPEM(existing.Status.Certificate)
		if err != nil {
			return fmt.Errorf("error parsing signed certificate for CSR: %w", err)
		}
		now := time.Now()
		for _, c := range certs {
			if now.After(c.NotAfter) {
				return fmt.Errorf("one of the certificates for the CSR has expired: %s", c.NotAfter)
			}
		}
	}
	return nil
}

func parseCSRPEM(data []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(b.Bytes)
}

// withMessage formats err into format, keeping an API error an API error
// (its Status, the message replaced) so that callers can still tell its
// reason.
func withMessage(format string, err error) error {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		se := &apierrors.StatusError{ErrStatus: s.Status()}
		se.ErrStatus.Message = fmt.Sprintf(format, se.ErrStatus.Message)
		return se
	}
	return fmt.Errorf(format, err)
}

// waitForCertificate waits, until ctx ends, for the CSR name of that UID to
// be issued, and returns its certificate. It lists the CSR until the
// apiserver answers (once a second), then watches it from that list: a
// denial or failure, a deletion or a new UID end the wait with an error.
// When ctx ends first, the error is wait's interrupted error.
func waitForCertificate(ctx context.Context, client Client, name string, uid types.UID) ([]byte, error) {
	csrs := client.CertificateSigningRequests()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		_, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err == nil {
			break
		}
		klog.V(2).InfoS("Error fetching the certificate signing request", "csr", name, "err", err)
		select {
		case <-ctx.Done():
			return nil, wait.ErrorInterrupted(nil)
		case <-time.After(time.Second):
		}
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return csrs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return csrs.Watch(ctx, o)
		},
	}, client)
	var issued []byte
	_, err := watchtools.UntilWithSync(ctx, lw, &certificatesv1.CertificateSigningRequest{}, nil, func(ev watch.Event) (bool, error) {
		switch ev.Type {
		case watch.Added, watch.Modified:
		case watch.Deleted:
			return false, fmt.Errorf("csr %q was deleted", name)
		default:
			return false, nil
		}
		csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
		if !ok {
			return false, fmt.Errorf("unexpected type received: %T", ev.Object)
		}
		if csr.UID != uid {
			return false, fmt.Errorf("csr %q changed UIDs", csr.Name)
		}
		approved := false
		for _, c := range csr.Status.Conditions {
			switch c.Type {
			case certificatesv1.CertificateDenied:
				return false, fmt.Errorf("certificate signing request is denied, reason: %v, message: %v", c.Reason, c.Message)
			case certificatesv1.CertificateFailed:
				return false, fmt.Errorf("certificate signing request failed, reason: %v, message: %v", c.Reason, c.Message)
			case certificatesv1.CertificateApproved:
				approved = true
			}
		}
		if approved {
			if len(csr.Status.Certificate) > 0 {
				klog.V(2).InfoS("Certificate signing request is issued", "csr", klog.KObj(csr))
				issued = csr.Status.Certificate
				return true, nil
			}
			klog.V(2).InfoS("Certificate signing request is approved, waiting to be issued", "csr", klog.KObj(csr))
		}
		return false, nil
	})
	switch {
	case wait.Interrupted(err):
		return nil, wait.ErrorInterrupted(nil)
	case err != nil:
		return nil, withMessage("cannot watch on the certificate signing request: %v", err)
	}
	return issued, nil
}
