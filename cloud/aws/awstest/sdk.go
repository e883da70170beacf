package awstest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"

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

// AWSNamesClient is HTTPClient for clients that use AWS's own endpoint
// names (https://sts.amazonaws.com, https://sts.eu-west-1.amazonaws.com,
// https://ec2.<region>.amazonaws.com): it sends every request to the
// cloud's endpoint over plain HTTP, whatever its URL, keeping the URL's host
// as the Host header the client signed. The cloud then checks signatures
// for the region of that name, as AWS does (see the package doc).
func (c *Cloud) AWSNamesClient() *http.Client {
	hc := HTTPClient()
	hc.Transport = redirectingTransport{endpoint: c.Endpoint, base: hc.Transport}
	return hc
}

// redirectingTransport sends requests to another endpoint, their Host
// header kept.
type redirectingTransport struct {
	endpoint func() string
	base     http.RoundTripper
}

func (t redirectingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	to, err := url.Parse(t.endpoint())
	if err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	if out.Host == "" {
		out.Host = r.URL.Host
	}
	out.URL.Scheme, out.URL.Host = to.Scheme, to.Host
	return t.base.RoundTrip(out)
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
