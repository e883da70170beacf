package awstest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"
)

// simulatorTPM is the NitroTPM of a fresh TPM simulator (one per process
// at a time: it is closed before the test goes on).
func simulatorTPM(t *testing.T) *NitroTPM {
	t.Helper()
	sim, err := simulator.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	tpm, err := NitroTPMOf(sim)
	if err != nil {
		t.Fatal(err)
	}
	return tpm
}

// TestGetInstanceTpmEkPub: an instance given a simulator's endorsement key
// is described with tpmSupport v2.0, and GetInstanceTpmEkPub serves that
// key through the SDK in both formats; the documented parameters are
// checked, and instances EC2 does not show or that have no NitroTPM are
// errors.
func TestGetInstanceTpmEkPub(t *testing.T) {
	c, _ := newCloud(t, nil)
	tpm := simulatorTPM(t)
	with := c.Put(Instance{PrivateIP: ip(1), NitroTPM: tpm})
	without := c.Put(Instance{PrivateIP: ip(2)})
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()

	out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{with.ID, without.ID}})
	if err != nil {
		t.Fatal(err)
	}
	support := map[string]string{}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			support[aws.ToString(in.InstanceId)] = aws.ToString(in.TpmSupport)
		}
	}
	if support[with.ID] != "v2.0" || support[without.ID] != "" {
		t.Fatalf("tpmSupport %v: want v2.0 for %s only", support, with.ID)
	}

	get := func(id string, kt types.EkPubKeyType, kf types.EkPubKeyFormat) (*ec2.GetInstanceTpmEkPubOutput, error) {
		return client.GetInstanceTpmEkPub(ctx, &ec2.GetInstanceTpmEkPubInput{InstanceId: aws.String(id), KeyType: kt, KeyFormat: kf})
	}
	tpmt, err := get(with.ID, types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(tpmt.KeyValue))
	if err != nil || !bytes.Equal(raw, tpm.RSA) {
		t.Fatalf("tpmt key value: %v; want the simulator's EK public area", err)
	}
	if aws.ToString(tpmt.InstanceId) != with.ID || tpmt.KeyType != types.EkPubKeyTypeRsa2048 || tpmt.KeyFormat != types.EkPubKeyFormatTpmt {
		t.Fatalf("answer %s %s %s", aws.ToString(tpmt.InstanceId), tpmt.KeyType, tpmt.KeyFormat)
	}
	der, err := get(with.ID, types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatDer)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = base64.StdEncoding.DecodeString(aws.ToString(der.KeyValue))
	key, err := x509.ParsePKIXPublicKey(raw)
	if err != nil {
		t.Fatalf("der key value: %v", err)
	}
	pub, _ := tpm2.DecodePublic(tpm.RSA)
	want, _ := pub.Key()
	if !want.(interface{ Equal(crypto.PublicKey) bool }).Equal(key) {
		t.Fatal("the der key is not the simulator's EK")
	}

	_, err = get(with.ID, types.EkPubKeyTypeEccSecP384, types.EkPubKeyFormatDer)
	wantAPIError(t, err, http.StatusInternalServerError, "InternalError")
	_, err = get(without.ID, types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt)
	wantMessage(t, wantAPIError(t, err, http.StatusBadRequest, "UnsupportedOperation"), without.ID)
	_, err = get("i-0123456789abcdef0", types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt)
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	_, err = get("i-nothex", types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt)
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.Malformed")
	_, err = get(with.ID, "rsa-4096", types.EkPubKeyFormatTpmt)
	wantMessage(t, wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue"), "KeyType")
	_, err = get(with.ID, types.EkPubKeyTypeRsa2048, "pem")
	wantMessage(t, wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue"), "KeyFormat")
	_, err = client.GetInstanceTpmEkPub(ctx, &ec2.GetInstanceTpmEkPubInput{InstanceId: aws.String(with.ID), KeyType: types.EkPubKeyTypeRsa2048, KeyFormat: types.EkPubKeyFormatTpmt, DryRun: aws.Bool(true)})
	wantAPIError(t, err, http.StatusPreconditionFailed, "DryRunOperation")

	// Throttling, as a test injects it: RequestLimitExceeded, counted.
	c.Fail(ActionGetInstanceTpmEkPub, 1, http.StatusServiceUnavailable, "RequestLimitExceeded")
	_, err = get(with.ID, types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt)
	wantAPIError(t, err, http.StatusServiceUnavailable, "RequestLimitExceeded")
	if _, err := get(with.ID, types.EkPubKeyTypeRsa2048, types.EkPubKeyFormatTpmt); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	if n := c.Calls(ActionGetInstanceTpmEkPub); n != 11 {
		t.Fatalf("%d calls counted, want 11", n)
	}
}

// TestGetInstanceTpmEkPubNewInstance: an instance still hidden by EC2's
// eventual consistency after launch is unknown to GetInstanceTpmEkPub too.
func TestGetInstanceTpmEkPubNewInstance(t *testing.T) {
	c, clk := newCloud(t, func(o *Options) { o.NewInstanceDelay = 2e9 })
	in := c.Put(Instance{PrivateIP: ip(1), NitroTPM: simulatorTPM(t)})
	client := ec2Client(c, staticCreds(testUser))
	input := &ec2.GetInstanceTpmEkPubInput{InstanceId: aws.String(in.ID), KeyType: types.EkPubKeyTypeRsa2048, KeyFormat: types.EkPubKeyFormatTpmt}
	_, err := client.GetInstanceTpmEkPub(context.Background(), input)
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	clk.Advance(3e9)
	if _, err := client.GetInstanceTpmEkPub(context.Background(), input); err != nil {
		t.Fatal(err)
	}
}

// TestNitroTPMChecked: Put refuses endorsement keys NitroTPM could not
// have.
func TestNitroTPMChecked(t *testing.T) {
	c, _ := newCloud(t, nil)
	tpm := simulatorTPM(t)
	for name, bad := range map[string]*NitroTPM{
		"no RSA key":      {},
		"garbage":         {RSA: []byte{1, 2, 3}},
		"RSA key for ECC": {RSA: tpm.RSA, ECC: tpm.RSA},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Put accepted it", name)
				}
			}()
			c.Put(Instance{PrivateIP: ip(1), NitroTPM: bad})
		}()
	}
}
