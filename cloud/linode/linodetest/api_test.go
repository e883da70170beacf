package linodetest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/linode/linodego"
)

func client(t *testing.T, c *Cloud, token string) *linodego.Client {
	t.Helper()
	lc := linodego.NewClient(&http.Client{})
	lc.SetBaseURL(c.Endpoint())
	lc.SetAPIVersion("v4")
	lc.SetToken(token)
	lc.SetRetryCount(0)
	return &lc
}

// The real client reads the endpoint's answers: instances with their
// fields, pages and results, and the documented errors as linodego.Error
// with the status and reason.
func TestWithLinodego(t *testing.T) {
	c := NewStarted(t, Options{})
	lc := client(t, c, c.Token())
	ctx := context.Background()
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.0.5", PrivateIP: "127.0.0.6", IPv6: "::1", Tags: []string{"a"}})
	got, err := lc.GetInstance(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != in.ID || got.Label != "web-1" || got.Status != linodego.InstanceRunning || got.Region != DefaultRegion ||
		got.Type != DefaultType || len(got.IPv4) != 2 || got.IPv4[0].String() != "127.0.0.5" || got.IPv6 != "::1/128" ||
		got.Created == nil || !got.Created.Equal(in.Created) {
		t.Fatalf("%+v", got)
	}
	for range 30 {
		c.Put(Instance{Label: "x", Tags: []string{"b"}})
	}
	opts := &linodego.ListOptions{PageOptions: &linodego.PageOptions{Page: 2}, PageSize: 25, Filter: `{"tags": "b"}`}
	page, err := lc.ListInstances(ctx, opts)
	if err != nil || len(page) != 5 || opts.Pages != 2 || opts.Results != 30 {
		t.Fatalf("%d, pages %d, results %d, %v", len(page), opts.Pages, opts.Results, err)
	}
	if _, err := lc.GetInstance(ctx, 1); !linodego.IsNotFound(err) {
		t.Fatalf("unknown id: %v", err)
	}
	_, err = lc.ListInstances(ctx, &linodego.ListOptions{PageSize: 10})
	if !linodego.ErrHasStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "page_size") {
		t.Fatalf("page_size 10: %v", err)
	}
	_, err = lc.ListInstances(ctx, &linodego.ListOptions{Filter: `{"label": "x"}`})
	if !linodego.ErrHasStatus(err, http.StatusBadRequest) {
		t.Fatalf("a filter not modelled: %v", err)
	}
	if _, err := client(t, c, "wrong").GetInstance(ctx, in.ID); !linodego.ErrHasStatus(err, http.StatusUnauthorized) ||
		!strings.Contains(err.Error(), "Invalid Token") {
		t.Fatalf("wrong token: %v", err)
	}
}
