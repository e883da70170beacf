package awstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
)

// ActionGetInstanceTpmEkPub is EC2's GetInstanceTpmEkPub.
const ActionGetInstanceTpmEkPub = "GetInstanceTpmEkPub"

func init() {
	ec2Actions[ActionGetInstanceTpmEkPub] = (*Cloud).serveGetInstanceTpmEkPub
}

// TPMSupportV2 is the tpmSupport EC2 describes an instance with NitroTPM
// with (Instance.TpmSupport in the EC2 API reference: "v2.0" when the
// instance is configured for NitroTPM support).
const TPMSupportV2 = "v2.0"

// NitroTPM is an instance's NitroTPM as EC2's API knows it: the public
// areas (TPMT_PUBLIC, TPM 2.0's wire form) of its endorsement keys, which
// GetInstanceTpmEkPub serves. A test gives an instance the endorsement key
// of the TPM its agent talks to (a simulator: NitroTPMOf).
type NitroTPM struct {
	// RSA is the RSA 2048 endorsement key's public area (KeyType
	// rsa-2048). Required.
	RSA []byte
	// ECC is the ECC NIST P-384 endorsement key's public area (KeyType
	// ecc-sec-p384); nil when the test gives none, and then the endpoint
	// answers such a call InternalError (not AWS's behaviour: every
	// NitroTPM has both).
	ECC []byte
}

// NitroTPMOf reads the RSA endorsement key of a TPM (go-tpm-tools' TCG
// default EK template, the one the node agent quotes with) for
// Instance.NitroTPM. It leaves ECC unset: the TCG default ECC EK is a
// P-256 key, not NitroTPM's P-384.
func NitroTPMOf(rw io.ReadWriter) (*NitroTPM, error) {
	ek, err := client.EndorsementKeyRSA(rw)
	if err != nil {
		return nil, fmt.Errorf("awstest: read the TPM's RSA endorsement key: %w", err)
	}
	defer ek.Close()
	pub, err := ek.PublicArea().Encode()
	if err != nil {
		return nil, fmt.Errorf("awstest: encode the RSA endorsement key: %w", err)
	}
	return &NitroTPM{RSA: pub}, nil
}

// check refuses endorsement keys NitroTPM could not have: an RSA key that
// is not RSA 2048, an ECC key that is not on P-384.
func (t *NitroTPM) check() error {
	rsaPub, err := decodeEK(t.RSA)
	if err != nil {
		return fmt.Errorf("RSA endorsement key: %w", err)
	}
	if k, ok := rsaPub.(*rsa.PublicKey); !ok || k.N.BitLen() != 2048 {
		return fmt.Errorf("RSA endorsement key: want an RSA 2048 key, have %T", rsaPub)
	}
	if t.ECC == nil {
		return nil
	}
	eccPub, err := decodeEK(t.ECC)
	if err != nil {
		return fmt.Errorf("ECC endorsement key: %w", err)
	}
	if k, ok := eccPub.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P384() {
		return fmt.Errorf("ECC endorsement key: want a NIST P-384 key, have %T", eccPub)
	}
	return nil
}

func decodeEK(public []byte) (any, error) {
	p, err := tpm2.DecodePublic(public)
	if err != nil {
		return nil, err
	}
	return p.Key()
}

func cloneNitroTPM(t *NitroTPM) *NitroTPM {
	if t == nil {
		return nil
	}
	return &NitroTPM{RSA: append([]byte(nil), t.RSA...), ECC: append([]byte(nil), t.ECC...)}
}

// getInstanceTpmEkPubResponse is EC2's GetInstanceTpmEkPub answer.
type getInstanceTpmEkPubResponse struct {
	XMLName    xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ GetInstanceTpmEkPubResponse"`
	RequestID  string   `xml:"requestId"`
	InstanceID string   `xml:"instanceId"`
	KeyType    string   `xml:"keyType"`
	KeyFormat  string   `xml:"keyFormat"`
	KeyValue   string   `xml:"keyValue"`
}

// serveGetInstanceTpmEkPub answers GetInstanceTpmEkPub (EC2 API
// reference): InstanceId, KeyType (rsa-2048 | ecc-sec-p384) and KeyFormat
// (der: the public key's DER, as OpenSSL reads it; tpmt: its TPMT_PUBLIC,
// as tpm2-tools reads it), all required, and DryRun; the key comes back
// base64-encoded in keyValue. An instance EC2 does not show (unknown, or
// still hidden after launch: NewInstanceDelay) is
// InvalidInstanceID.NotFound; an instance without NitroTPM is
// UnsupportedOperation (AWS documents no error code for it: this is the
// model's choice).
func (c *Cloud) serveGetInstanceTpmEkPub(q *queryRequest) (any, *apiError) {
	p, aerr := parseEC2Params(q, nil, []string{"InstanceId", "KeyType", "KeyFormat"})
	if aerr != nil {
		return nil, aerr
	}
	id, keyType, format := p.scalars["InstanceId"], p.scalars["KeyType"], p.scalars["KeyFormat"]
	for _, req := range []struct{ name, v string }{{"InstanceId", id}, {"KeyType", keyType}, {"KeyFormat", format}} {
		if req.v == "" {
			return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter " + req.name}
		}
	}
	if aerr := instanceIDs([]string{id}); aerr != nil {
		return nil, aerr
	}
	if keyType != "rsa-2048" && keyType != "ecc-sec-p384" {
		return nil, invalidParameter(fmt.Sprintf("Value (%s) for parameter KeyType is invalid. Valid values: rsa-2048, ecc-sec-p384.", keyType))
	}
	if format != "der" && format != "tpmt" {
		return nil, invalidParameter(fmt.Sprintf("Value (%s) for parameter KeyFormat is invalid. Valid values: der, tpmt.", format))
	}
	if p.dryRun {
		return nil, dryRunOK
	}
	c.mu.Lock()
	in, ok := c.instances[id]
	visible := ok && c.visibleLocked(id)
	c.mu.Unlock()
	switch {
	case !visible:
		return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
	case in.NitroTPM == nil:
		return nil, &apiError{http.StatusBadRequest, "UnsupportedOperation", fmt.Sprintf("The instance '%s' does not have NitroTPM enabled.", id)}
	}
	public := in.NitroTPM.RSA
	if keyType == "ecc-sec-p384" {
		public = in.NitroTPM.ECC
	}
	if public == nil {
		return nil, &apiError{http.StatusInternalServerError, "InternalError", "awstest: the test gave instance " + id + " no ECC endorsement key"}
	}
	value := public
	if format == "der" {
		key, err := decodeEK(public)
		if err == nil {
			value, err = x509.MarshalPKIXPublicKey(key)
		}
		if err != nil {
			// Put checked the key: only a programming error gets here.
			return nil, &apiError{http.StatusInternalServerError, "InternalError", "awstest: encoding the endorsement key: " + err.Error()}
		}
	}
	return getInstanceTpmEkPubResponse{
		RequestID: q.requestID, InstanceID: id, KeyType: keyType, KeyFormat: format,
		KeyValue: base64.StdEncoding.EncodeToString(value),
	}, nil
}
