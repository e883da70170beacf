// Package localtest starts a real local cloud inside a test process: the
// same server the daemon runs, on an httptest listener, with a state file
// in the test's temp dir and address pools of its own.
package localtest

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/local/server"
)

// Token is the API token of test clouds.
const Token = "localtest-token"

// Cloud is a running test cloud.
type Cloud struct {
	Server    *server.Server
	Client    *client.Client
	URL       string
	TokenFile string
	Config    server.Config
}

var seq atomic.Int32

// Pools returns address pools no other test cloud in this machine's
// concurrently running test processes is likely to use: the third octet
// comes from the process id, the second from a per-process counter.
func Pools() (internal, external, vip string) {
	k := int(seq.Add(1)) % 20
	b := os.Getpid() % 250
	return fmt.Sprintf("127.%d.%d.0/24", 150+k, b),
		fmt.Sprintf("127.%d.%d.0/24", 170+k, b),
		fmt.Sprintf("127.%d.%d.0/24", 190+k, b)
}

// Start runs a cloud until the test ends; mutate may change its config.
func Start(t testing.TB, mutate func(*server.Config)) *Cloud {
	t.Helper()
	dir := t.TempDir()
	in, ex, vip := Pools()
	cfg := server.Config{
		StatePath:    filepath.Join(dir, "state.db"),
		Token:        Token,
		InternalCIDR: in,
		ExternalCIDR: ex,
		VIPCIDR:      vip,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	c, err := client.New(hs.URL, Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &Cloud{Server: srv, Client: c, URL: hs.URL, TokenFile: tokenFile, Config: cfg}
}
