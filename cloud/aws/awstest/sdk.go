package awstest

import (
	"bytes"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// HTTPClient is an HTTP client for aws-sdk-go-v2 clients of a Cloud (the
// HTTPClient of aws.Config or of a service's Options). The SDK closes a
// request's body as soon as the answer's headers arrive; on loopback they
// can arrive before net/http's write loop is done with that body, which
// then fails and closes the connection, and an answer larger than the read
// buffer (a DescribeInstances of a few instances) breaks off with "use of
// closed network connection". This client hands net/http a private copy of
// each body, so calls never fail that way, whatever the retry settings.
func HTTPClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Transport: bodyCopyingTransport{base: base}}
}

// Config is an SDK configuration for the cloud: its region, its endpoint
// as BaseEndpoint (for ec2.NewFromConfig and sts.NewFromConfig), the
// credentials given, and HTTPClient.
func (c *Cloud) Config(creds aws.CredentialsProvider) aws.Config {
	return aws.Config{
		Region:       c.region,
		Credentials:  creds,
		BaseEndpoint: aws.String(c.Endpoint()),
		HTTPClient:   HTTPClient(),
	}
}

// bodyCopyingTransport sends a copy of the request body it reads whole.
type bodyCopyingTransport struct{ base http.RoundTripper }

func (t bodyCopyingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.base.RoundTrip(r)
	}
	b, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	out.Body = io.NopCloser(bytes.NewReader(b))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	out.ContentLength = int64(len(b))
	return t.base.RoundTrip(out)
}
