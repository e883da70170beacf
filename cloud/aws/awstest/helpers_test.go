package awstest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

// testUser is the caller of most tests.
var testUser = User{Name: "ccm", AccessKeyID: "AKIAAWSTESTCCM000001", SecretAccessKey: "awstest/ccm/secret/0123456789abcdefghij"}

// clock is a test clock near the machine's (so that the SDK's own notion of
// time agrees with the cloud's until a test moves it).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().UTC().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newCloud starts a cloud with testUser on a test clock.
func newCloud(t *testing.T, mutate func(*Options)) (*Cloud, *clock) {
	t.Helper()
	clk := newClock()
	opts := Options{Users: []User{testUser}, Now: clk.Now}
	if mutate != nil {
		mutate(&opts)
	}
	return NewStarted(t, opts), clk
}

// ip is the n-th loopback address of a test (127.1.x.y).
func ip(n int) string { return fmt.Sprintf("127.1.%d.%d", n/250, n%250+1) }

func staticCreds(u User) aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(u.AccessKeyID, u.SecretAccessKey, "")
}

func roleCredsProvider(creds aws.Credentials) aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
}

// sdkConfig is the cloud's SDK configuration, without retries.
func sdkConfig(c *Cloud, creds aws.CredentialsProvider) aws.Config {
	cfg := c.Config(creds)
	cfg.RetryMaxAttempts = 1
	return cfg
}

// withRetries lets the SDK retry up to attempts times, without waiting.
func withRetries(cfg aws.Config, attempts int) aws.Config {
	cfg.RetryMaxAttempts = attempts
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	}
	return cfg
}

func ec2Client(c *Cloud, creds aws.CredentialsProvider, optFns ...func(*ec2.Options)) *ec2.Client {
	return ec2.NewFromConfig(sdkConfig(c, creds), optFns...)
}

func stsClient(c *Cloud, creds aws.CredentialsProvider, optFns ...func(*sts.Options)) *sts.Client {
	return sts.NewFromConfig(sdkConfig(c, creds), optFns...)
}

// imdsClient talks to an instance's metadata service without retries.
func imdsClient(t *testing.T, c *Cloud, id string) *imds.Client {
	t.Helper()
	url, err := c.IMDS(id)
	if err != nil {
		t.Fatal(err)
	}
	return imds.New(imds.Options{Endpoint: url, Retryer: aws.NopRetryer{}, EnableFallback: aws.FalseTernary})
}

// instanceRoleCreds is what an SDK on the instance gets: ec2rolecreds over
// the instance's metadata service.
func instanceRoleCreds(t *testing.T, c *Cloud, id string) aws.CredentialsProvider {
	t.Helper()
	client := imdsClient(t, c, id)
	return aws.NewCredentialsCache(ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = client }))
}

// signerAt signs at a time of its choosing instead of the SDK's.
type signerAt struct {
	at      func() time.Time
	service string // "" keeps the SDK's
}

func (s signerAt) SignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) error {
	if s.service != "" {
		service = s.service
	}
	return v4.NewSigner().SignHTTP(ctx, creds, r, payloadHash, service, region, s.at(), optFns...)
}

// wantAPIError checks that err is the API error code answered with status.
func wantAPIError(t *testing.T, err error, status int, code string) smithy.APIError {
	t.Helper()
	if err == nil {
		t.Fatalf("want %d %s, got success", status, code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want %d %s, got %v", status, code, err)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("want error code %s, got %s (%v)", code, ae.ErrorCode(), err)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("want HTTP status %d, got %v", status, err)
	}
	return ae
}

// wantMessage checks an API error's message.
func wantMessage(t *testing.T, ae smithy.APIError, part string) {
	t.Helper()
	if !strings.Contains(ae.ErrorMessage(), part) {
		t.Fatalf("message %q does not say %q", ae.ErrorMessage(), part)
	}
}
