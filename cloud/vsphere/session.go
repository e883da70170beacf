package vsphere

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/internal/version"
)

// conn is mooring's sessions with vCenter: one of the SOAP API (vim25: the
// inventory, the property collector) and one of the REST API (vAPI: tags),
// both logged in as the configured user. It logs in on first use, and
// again after vCenter forgets a session (a NotAuthenticated fault, HTTP
// 401), once per call.
type conn struct {
	cfg  Config
	wrap func(http.RoundTripper) http.RoundTripper

	mu   sync.Mutex
	vim  *vim25.Client
	rest *rest.Client
}

// clients are a logged-in pair.
type clients struct {
	vim  *vim25.Client
	rest *rest.Client
}

// do runs f with logged-in clients; when f fails because vCenter no longer
// knows the session, it logs in again and runs f once more.
func (c *conn) do(ctx context.Context, f func(context.Context, clients) error) error {
	cl, err := c.login(ctx)
	if err != nil {
		return err
	}
	err = f(ctx, cl)
	if !notAuthenticated(err) && !c.restSessionLost(ctx, cl, err) {
		return err
	}
	klog.InfoS("vCenter session expired; logging in again", "server", c.cfg.serverURL().Host)
	c.forget(cl)
	if cl, err = c.login(ctx); err != nil {
		return err
	}
	return f(ctx, cl)
}

// login returns the logged-in clients, logging in when there are none.
func (c *conn) login(ctx context.Context) (clients, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vim != nil && c.rest != nil {
		return clients{c.vim, c.rest}, nil
	}
	password, err := c.cfg.Password()
	if err != nil {
		return clients{}, err
	}
	user := url.UserPassword(c.cfg.Username, password)
	sc := soap.NewClient(c.cfg.serverURL(), false)
	if c.cfg.CAFile != "" {
		if _, err := c.cfg.roots(); err != nil {
			return clients{}, err
		}
		if err := sc.SetRootCAs(c.cfg.CAFile); err != nil {
			return clients{}, fmt.Errorf("vsphere: caFile: %w", err)
		}
	}
	sc.UserAgent = "mooring/" + version.Get().Version
	if c.wrap != nil {
		sc.Client.Transport = c.wrap(sc.Client.Transport)
	}
	vim, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return clients{}, fmt.Errorf("vsphere: connect to %s: %w", c.cfg.serverURL().Host, err)
	}
	if err := session.NewManager(vim).Login(ctx, user); err != nil {
		return clients{}, fmt.Errorf("vsphere: log in to %s as %s: %w", c.cfg.serverURL().Host, c.cfg.Username, err)
	}
	rc := rest.NewClient(vim)
	if c.wrap != nil {
		rc.Client.Client.Transport = c.wrap(rc.Client.Client.Transport)
	}
	if err := rc.Login(ctx, user); err != nil {
		_ = session.NewManager(vim).Logout(ctx)
		return clients{}, fmt.Errorf("vsphere: log in to %s's REST API (tags) as %s: %w", c.cfg.serverURL().Host, c.cfg.Username, err)
	}
	klog.InfoS("Logged in to vCenter", "server", c.cfg.serverURL().Host, "user", c.cfg.Username, "about", vim.ServiceContent.About.FullName)
	c.vim, c.rest = vim, rc
	return clients{vim, rc}, nil
}

// forget drops the clients cl, unless another call replaced them already.
func (c *conn) forget(cl clients) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vim == cl.vim {
		c.vim, c.rest = nil, nil
	}
}

// restSessionLost reports whether err is a failed REST call whose session
// vCenter no longer knows. The tag library does not always keep the HTTP
// status in its errors, so the session itself is asked (one request, only
// after a REST call failed).
func (c *conn) restSessionLost(ctx context.Context, cl clients, err error) bool {
	var re *restError
	if !errors.As(err, &re) {
		return false
	}
	s, serr := cl.rest.Session(ctx)
	return serr == nil && s == nil
}

// restError marks the errors of REST (vAPI) calls.
type restError struct{ err error }

func (e *restError) Error() string { return e.err.Error() }
func (e *restError) Unwrap() error { return e.err }

// notAuthenticated reports whether err is vCenter's answer that the
// session is not (or no longer) logged in.
func notAuthenticated(err error) bool {
	if err == nil {
		return false
	}
	if rest.IsStatusError(err, http.StatusUnauthorized) {
		return true
	}
	return fault.Is(err, &types.NotAuthenticated{})
}
