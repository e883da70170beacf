package agentid

import (
	"context"
	"strings"
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

// EndpointRegion reads the region from AWS's STS host names: the global
// endpoint is us-east-1's; other hosts have none.
func TestEndpointRegion(t *testing.T) {
	for host, want := range map[string]string{
		"sts.amazonaws.com":                                      "us-east-1",
		"STS.amazonaws.com.":                                     "us-east-1",
		"sts.amazonaws.com:443":                                  "us-east-1",
		"sts.eu-west-1.amazonaws.com":                            "eu-west-1",
		"sts-fips.us-east-2.amazonaws.com":                       "us-east-2",
		"sts.us-gov-west-1.amazonaws.com":                        "us-gov-west-1",
		"sts.cn-north-1.amazonaws.com.cn":                        "cn-north-1",
		"vpce-0a1b2c3d-x1y2z3.sts.ap-south-1.vpce.amazonaws.com": "ap-south-1",
		"127.0.0.1:8080":                                         "",
		"sts.example.com":                                        "",
		"sts.amazonaws.com.evil":                                 "",
		"ec2.eu-west-1.amazonaws.com":                            "",
		"sts.eu-west-1.amazonaws.com.evil.example":               "",
	} {
		got, ok := EndpointRegion(host)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q, %v; want %q", host, got, ok, want)
		}
	}
}

// CheckEndpointRegion refuses an AWS endpoint that would refuse the
// region's signatures, naming the endpoint to use instead.
func TestCheckEndpointRegion(t *testing.T) {
	for _, tc := range []struct{ endpoint, region, want string }{
		{"https://sts.amazonaws.com", "us-east-1", ""},
		{"https://sts.amazonaws.com", "eu-west-1", "https://sts.eu-west-1.amazonaws.com"},
		{"https://sts.eu-west-1.amazonaws.com", "eu-west-1", ""},
		{"https://sts.us-west-2.amazonaws.com", "eu-west-1", "region us-west-2's"},
		{"https://sts.cn-north-1.amazonaws.com.cn", "cn-northwest-1", "https://sts.cn-northwest-1.amazonaws.com.cn"},
		{"http://127.0.0.1:4566", "eu-west-1", ""},
		{"https://sts.example.com", "eu-west-1", ""},
	} {
		err := CheckEndpointRegion(tc.endpoint, tc.region)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s for %s: %v; want an error with %q", tc.endpoint, tc.region, err, tc.want)
		}
	}
}
