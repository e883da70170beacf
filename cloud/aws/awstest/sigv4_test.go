package awstest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// afterSigning changes (or replaces) the request the SDK has just signed.
func afterSigning(change func(*smithyhttp.Request) (*smithyhttp.Request, error)) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("tamper", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			r, err := change(in.Request.(*smithyhttp.Request))
			if err != nil {
				return middleware.FinalizeOutput{}, middleware.Metadata{}, err
			}
			in.Request = r
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
	}
}

// Each way a signature can be wrong is refused with AWS's code, by the real
// SDK clients; none of them reaches the action.
func TestSigV4Refusals(t *testing.T) {
	c, clk := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "node"})
	role, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	user := staticCreds(testUser)
	ctx := context.Background()
	describe := func(creds aws.CredentialsProvider, optFns ...func(*ec2.Options)) error {
		_, err := ec2Client(c, creds, optFns...).DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(10)})
		return err
	}
	whoami := func(creds aws.CredentialsProvider, optFns ...func(*sts.Options)) error {
		_, err := stsClient(c, creds, optFns...).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		return err
	}
	shifted := func(d time.Duration) signerAt { return signerAt{at: func() time.Time { return clk.Now().Add(d) }} }

	cases := []struct {
		name    string
		call    func() error
		status  int
		code    string
		message string
	}{
		{"body changed after signing", func() error {
			return describe(user, func(o *ec2.Options) {
				o.APIOptions = append(o.APIOptions, afterSigning(func(r *smithyhttp.Request) (*smithyhttp.Request, error) {
					b, err := io.ReadAll(r.GetStream())
					if err != nil {
						return nil, err
					}
					if !bytes.Contains(b, []byte("MaxResults=10")) {
						return nil, fmt.Errorf("unexpected body %q", b)
					}
					return r.SetStream(bytes.NewReader(bytes.Replace(b, []byte("MaxResults=10"), []byte("MaxResults=99"), 1)))
				}))
			})
		}, 403, "SignatureDoesNotMatch", "does not match the signature you provided"},
		{"signed header changed after signing", func() error {
			return whoami(user, func(o *sts.Options) {
				o.APIOptions = append(o.APIOptions, afterSigning(func(r *smithyhttp.Request) (*smithyhttp.Request, error) {
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=latin1")
					return r, nil
				}))
			})
		}, 403, "SignatureDoesNotMatch", "does not match"},
		{"signed header dropped after signing", func() error {
			return whoami(user, func(o *sts.Options) {
				o.APIOptions = append(o.APIOptions, afterSigning(func(r *smithyhttp.Request) (*smithyhttp.Request, error) {
					r.Header.Del("Amz-Sdk-Request")
					return r, nil
				}))
			})
		}, 403, "SignatureDoesNotMatch", "does not match"},
		{"wrong secret", func() error {
			return whoami(staticCreds(User{AccessKeyID: testUser.AccessKeyID, SecretAccessKey: "not-the-secret"}))
		}, 403, "SignatureDoesNotMatch", "does not match"},
		{"stale date", func() error {
			return describe(user, func(o *ec2.Options) { o.HTTPSignerV4 = shifted(-16 * time.Minute) })
		}, 403, "SignatureDoesNotMatch", "Signature expired"},
		{"future date", func() error {
			return whoami(user, func(o *sts.Options) { o.HTTPSignerV4 = shifted(16 * time.Minute) })
		}, 403, "SignatureDoesNotMatch", "Signature not yet current"},
		{"another region", func() error {
			return whoami(user, func(o *sts.Options) { o.Region = "us-west-2" })
		}, 403, "SignatureDoesNotMatch", "valid region, not 'us-west-2'"},
		{"another service's scope", func() error {
			return describe(user, func(o *ec2.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now, service: "sts"} })
		}, 403, "SignatureDoesNotMatch", "scoped to correct service: 'ec2'"},
		{"unknown key", func() error {
			return describe(staticCreds(User{AccessKeyID: "AKIANOBODYKNOWSTHIS1", SecretAccessKey: "x"}))
		}, 403, "InvalidClientTokenId", "security token included in the request is invalid"},
		{"role key, wrong session token", func() error {
			return whoami(roleCredsProvider(aws.Credentials{AccessKeyID: role.AccessKeyID, SecretAccessKey: role.SecretAccessKey, SessionToken: "forged"}))
		}, 403, "InvalidClientTokenId", "invalid"},
		{"role key, no session token", func() error {
			return whoami(roleCredsProvider(aws.Credentials{AccessKeyID: role.AccessKeyID, SecretAccessKey: role.SecretAccessKey}))
		}, 403, "InvalidClientTokenId", "invalid"},
		{"user key with a session token", func() error {
			return whoami(roleCredsProvider(aws.Credentials{AccessKeyID: testUser.AccessKeyID, SecretAccessKey: testUser.SecretAccessKey, SessionToken: role.SessionToken}))
		}, 403, "InvalidClientTokenId", "invalid"},
		{"role credentials on EC2", func() error {
			return describe(roleCredsProvider(role))
		}, 403, "UnauthorizedOperation", "assumed-role/node/" + in.ID},
	}
	refused := map[string]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ae := wantAPIError(t, tc.call(), tc.status, tc.code)
			wantMessage(t, ae, tc.message)
		})
		refused[tc.code]++
	}
	for code, n := range refused {
		if got := c.Refused(code); got != n {
			t.Errorf("Refused(%s) = %d, want %d", code, got, n)
		}
	}
	if n := c.Calls(ActionDescribeInstances) + c.Calls(ActionGetCallerIdentity); n != 0 {
		t.Errorf("%d refused calls were counted as answered", n)
	}
	// The same clients, signing properly, get through.
	if err := describe(user); err != nil {
		t.Fatal(err)
	}
	if err := whoami(roleCredsProvider(role)); err != nil {
		t.Fatal(err)
	}
	// 14 minutes off either way is still inside the window.
	if err := whoami(user, func(o *sts.Options) { o.HTTPSignerV4 = shifted(-14 * time.Minute) }); err != nil {
		t.Fatal(err)
	}
	if err := whoami(user, func(o *sts.Options) { o.HTTPSignerV4 = shifted(14 * time.Minute) }); err != nil {
		t.Fatal(err)
	}
}

// Role credentials past their expiry are ExpiredToken, signed in time or
// not.
func TestSigV4ExpiredRoleCredentials(t *testing.T) {
	c, clk := newCloud(t, func(o *Options) { o.CredentialLifetime = time.Hour })
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "node"})
	role, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	client := stsClient(c, roleCredsProvider(role), func(o *sts.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now} })
	_, err = client.GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{})
	ae := wantAPIError(t, err, http.StatusForbidden, "ExpiredToken")
	wantMessage(t, ae, "expired")
}

// rawRequest is a GetCallerIdentity request signed with the SDK's signer,
// for the refusals the SDK's clients cannot be made to produce.
func rawRequest(t *testing.T, c *Cloud, body string, signAt time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.Endpoint()+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: testUser.AccessKeyID, SecretAccessKey: testUser.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sts", c.Region(), signAt); err != nil {
		t.Fatal(err)
	}
	return req
}

// send sends a raw request and returns its status and body.
func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, b := cloudtest.Do(t, req)
	return resp.StatusCode, string(b)
}

// Authorization headers that are not whole, bodies too big, and requests
// without a signature.
func TestSigV4RawRefusals(t *testing.T) {
	c, clk := newCloud(t, nil)
	const body = "Action=GetCallerIdentity&Version=2011-06-15"
	edit := func(from, to string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), from, to, 1))
		}
	}
	cases := []struct {
		name   string
		change func(*http.Request)
		status int
		code   string
	}{
		{"as signed", func(*http.Request) {}, 200, ""},
		{"host not signed", edit("SignedHeaders=content-length;content-type;host;", "SignedHeaders=content-length;content-type;"), 400, "IncompleteSignature"},
		{"x-amz-date not signed", edit(";x-amz-date,", ","), 400, "IncompleteSignature"},
		{"no signature", edit("Signature=", "Sig="), 400, "IncompleteSignature"},
		{"another algorithm", edit("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512"), 400, "IncompleteSignature"},
		{"scope date not the X-Amz-Date's", func(r *http.Request) {
			edit("/"+clk.Now().UTC().Format("20060102")+"/", "/20000101/")(r)
		}, 403, "SignatureDoesNotMatch"},
		{"no Authorization", func(r *http.Request) { r.Header.Del("Authorization") }, 403, "MissingAuthenticationToken"},
		{"Host changed", func(r *http.Request) { r.Host = "localhost:1" }, 403, "SignatureDoesNotMatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := rawRequest(t, c, body, clk.Now())
			tc.change(req)
			if tc.name == "Host changed" {
				// Send to the cloud, naming another host.
				req.URL.Host = strings.TrimPrefix(c.Endpoint(), "http://")
			}
			status, got := send(t, req)
			if status != tc.status || !strings.Contains(got, fmt.Sprintf("<Code>%s</Code>", tc.code)) && tc.code != "" {
				t.Fatalf("got %d %s, want %d %s", status, got, tc.status, tc.code)
			}
			if tc.code != "" && !strings.Contains(got, "<ErrorResponse") {
				t.Fatalf("an STS error is not an ErrorResponse: %s", got)
			}
		})
	}

	big := body + "&Pad=" + strings.Repeat("x", maxBody)
	status, got := send(t, rawRequest(t, c, big, clk.Now()))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(got, "RequestEntityTooLarge") {
		t.Fatalf("a %d-byte body: %d %s", len(big), status, got)
	}
}
