package agentid

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

func TestDefaultSTSEndpoint(t *testing.T) {
	for region, want := range map[string]string{
		"us-east-1":     "https://sts.us-east-1.amazonaws.com",
		"us-gov-west-1": "https://sts.us-gov-west-1.amazonaws.com",
		"cn-north-1":    "https://sts.cn-north-1.amazonaws.com.cn",
	} {
		if got := DefaultSTSEndpoint(region); got != want {
			t.Errorf("%s: %s, want %s", region, got, want)
		}
	}
}

// FuzzDecodeEvidence: the decoder never panics, and what it accepts
// encodes back to evidence it reads the same.
func FuzzDecodeEvidence(f *testing.F) {
	creds := aws.Credentials{AccessKeyID: "ASIAEXAMPLEEXAMPLE01", SecretAccessKey: "secret", SessionToken: "token"}
	r, err := SignCallerIdentity(context.Background(), v4.NewSigner(), creds, "https://sts.us-east-1.amazonaws.com", "us-east-1", "b1nd1ng", t0)
	if err != nil {
		f.Fatal(err)
	}
	good, err := r.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"v":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeSTSRequest(data)
		if err != nil {
			return
		}
		again, err := r.Encode()
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", data, err)
		}
		r2, err := DecodeSTSRequest(again)
		if err != nil || r2 != r {
			t.Fatalf("re-encoded %q reads %+v, %v; want %+v", again, r2, err, r)
		}
	})
}
