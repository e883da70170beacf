package gcetest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

func service(t *testing.T, c *Cloud) *compute.Service {
	t.Helper()
	s, err := compute.NewService(context.Background(), option.WithEndpoint(c.Endpoint()), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func kidOf(t *testing.T, c *Cloud, in Instance) string {
	t.Helper()
	tok, err := c.Token(in, TokenOptions{Audience: "a", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Headers[0].KeyID
}

// Both certs endpoints allow caching for hours, as Google's do.
func TestCertsCacheControl(t *testing.T) {
	now := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	c := NewStarted(t, Options{Now: func() time.Time { return now }})
	for _, url := range []string{c.CertsURL(), c.PEMCertsURL()} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Get("Cache-Control"); got != "public, max-age=21600, must-revalidate, no-transform" {
			t.Errorf("%s: Cache-Control %q", url, got)
		}
		if got := resp.Header.Get("Expires"); got != "Thu, 26 Nov 2026 10:00:00 GMT" {
			t.Errorf("%s: Expires %q", url, got)
		}
	}
}

// A rotation in Google's order: the new key is published before it
// signs, the old one stays published after, then is withdrawn.
func TestKeyRotationOrder(t *testing.T) {
	c := NewStarted(t, Options{})
	in := c.Put(Instance{Name: "node-1", InternalIP: "127.0.79.10"})
	old := c.SigningKeyID()
	next, err := c.Publish()
	if err != nil {
		t.Fatal(err)
	}
	if ids := c.KeyIDs(); len(ids) != 2 || ids[0] != old || ids[1] != next {
		t.Fatalf("published %v, want [%s %s]", ids, old, next)
	}
	if got := kidOf(t, c, in); got != old {
		t.Fatalf("published, not yet active: signed by %s, want %s", got, old)
	}
	if err := c.Activate(next); err != nil {
		t.Fatal(err)
	}
	if got := kidOf(t, c, in); got != next || len(c.KeyIDs()) != 2 {
		t.Fatalf("active: signed by %s, published %v", got, c.KeyIDs())
	}
	c.Retire(old)
	if ids := c.KeyIDs(); len(ids) != 1 || ids[0] != next {
		t.Fatalf("after retirement: %v", ids)
	}
	if err := c.Activate(old); err == nil {
		t.Fatal("activated a withdrawn key")
	}
	c.Retire(next)
	if _, err := c.Token(in, TokenOptions{Audience: "a"}); err == nil {
		t.Fatal("signed with no key published")
	}
}

// aggregatedList: zones without instances on a page carry
// NO_RESULTS_ON_PAGE; an unreachable zone's instances are missing, its
// scope carries UNREACHABLE, and unreachables names it when partial
// success was asked for; pages follow pageToken.
func TestAggregatedListScopes(t *testing.T) {
	c := NewStarted(t, Options{MaxPageSize: 1})
	c.Put(Instance{Name: "a-1", InternalIP: "127.0.79.10"})
	c.Put(Instance{Name: "b-1", Zone: "europe-west4-b", InternalIP: "127.0.79.11"})
	c.Put(Instance{Name: "c-1", Zone: "us-central1-ai1a", InternalIP: "127.0.79.12"})
	s := service(t, c)
	ctx := context.Background()
	names := func(l *compute.InstanceAggregatedList) (got []string, warnings map[string]string) {
		warnings = map[string]string{}
		for scope, sl := range l.Items {
			for _, in := range sl.Instances {
				got = append(got, in.Name)
			}
			if sl.Warning != nil {
				warnings[scope] = sl.Warning.Code
			}
		}
		return got, warnings
	}
	var all []string
	token := ""
	for range 5 {
		call := s.Instances.AggregatedList(DefaultProject).Context(ctx)
		if token != "" {
			call = call.PageToken(token)
		}
		page, err := call.Do()
		if err != nil {
			t.Fatal(err)
		}
		got, warnings := names(page)
		if len(got) != 1 || len(warnings) != 2 {
			t.Fatalf("page: %v, warnings %v", got, warnings)
		}
		for _, code := range warnings {
			if code != "NO_RESULTS_ON_PAGE" {
				t.Fatalf("warnings %v", warnings)
			}
		}
		all = append(all, got...)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if strings.Join(all, ",") != "b-1,a-1,c-1" {
		t.Fatalf("listed %v", all)
	}
	if c.Calls("aggregatedList") != 3 || c.Calls(NextPage) != 2 {
		t.Fatalf("calls: aggregatedList %d, of them next pages %d; want 3 and 2", c.Calls("aggregatedList"), c.Calls(NextPage))
	}
	if _, err := s.Instances.AggregatedList("another-project").PageToken(token + "x").Context(ctx).Do(); err == nil {
		t.Fatal("a foreign page token was taken")
	}

	c.SetUnreachable("europe-west4-b", true)
	for _, partial := range []bool{false, true} {
		page, err := s.Instances.AggregatedList(DefaultProject).MaxResults(500).Context(ctx).
			Do(googleapi.QueryParameter("returnPartialSuccess", fmt.Sprint(partial)))
		if err != nil {
			t.Fatal(err)
		}
		got, warnings := names(page)
		if strings.Join(got, ",") == "" || strings.Contains(strings.Join(got, ","), "b-1") || warnings["zones/europe-west4-b"] != "UNREACHABLE" {
			t.Fatalf("partial %v: %v, warnings %v", partial, got, warnings)
		}
		if want := map[bool]string{false: "", true: "zones/europe-west4-b"}[partial]; strings.Join(page.Unreachables, ",") != want {
			t.Fatalf("partial %v: unreachables %v", partial, page.Unreachables)
		}
	}
	c.SetUnreachable("europe-west4-b", false)
	page, err := s.Instances.AggregatedList(DefaultProject).MaxResults(500).Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	if got, warnings := names(page); strings.Join(got, ",") != "b-1" || warnings["zones/europe-west4-b"] != "" || len(page.Unreachables) != 0 {
		t.Fatalf("reachable again: %v, warnings %v", got, warnings)
	}
}
