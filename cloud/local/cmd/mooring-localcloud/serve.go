package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/server"
	"github.com/mooring-dev/mooring/internal/atomicfile"
)

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	klog.InitFlags(fs)
	var (
		cfg         server.Config
		listen      = fs.String("listen", "127.0.0.1:8780", "address of the API (host:port; port 0 picks a free one)")
		addressFile = fs.String("address-file", "", "write the API's URL to this file once it listens")
		tokenFile   = fs.String("token-file", "", "file holding the bearer token API calls must carry (required)")
		zones       = fs.String("zones", "", "comma-separated zones (default REGION+a,b,c)")
		types       = fs.String("instance-types", "", "comma-separated instance types; the first is the default (default standard-2,standard-4,highmem-4)")
		latency     = fs.Duration("fault-latency", 0, "latency added to every API call")
		errorRate   = fs.Float64("fault-error-rate", 0, "share (0..1) of API calls that fail with 503")
	)
	fs.StringVar(&cfg.StatePath, "state", "localcloud.db", "state file (bbolt); created when missing, with its directory (mode 0700)")
	fs.StringVar(&cfg.Region, "region", server.DefaultRegion, "the cloud's region")
	fs.StringVar(&cfg.InternalCIDR, "internal-cidr", server.DefaultInternalCIDR, "pool of instances' internal IPs")
	fs.StringVar(&cfg.ExternalCIDR, "external-cidr", server.DefaultExternalCIDR, "pool of instances' external IPs")
	fs.StringVar(&cfg.VIPCIDR, "vip-cidr", server.DefaultVIPCIDR, "pool of load balancer VIPs")
	fs.StringVar(&cfg.DNSDomain, "dns-domain", server.DefaultDNSDomain, "suffix of instances' InternalDNS names")
	fs.IntVar(&cfg.MetadataPort, "metadata-port", 8169, "port of each instance's metadata service on its internal IP (0: a free port per instance)")
	fs.StringVar(&cfg.Issuer, "issuer", server.DefaultIssuer, "issuer (iss) of identity tokens")
	fs.DurationVar(&cfg.TokenTTL, "token-ttl", server.DefaultTokenTTL, "lifetime of identity tokens")
	fs.DurationVar(&cfg.KeyRotation, "key-rotation", server.DefaultKeyRotation, "how often the identity key rotates (0: never)")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", 0, "API calls per second (0: unlimited); excess calls get 429 with Retry-After")
	fs.IntVar(&cfg.RateBurst, "rate-burst", 0, "API calls allowed in a burst (default: the rate limit, at least 1)")
	fs.DurationVar(&cfg.BootDelay, "boot-delay", 0, "how long a new or started instance stays pending")
	fs.DurationVar(&cfg.TerminatedRetention, "terminated-retention", server.DefaultRetention, "how long terminated instances stay listed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if *tokenFile == "" {
		return errors.New("--token-file is required")
	}
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	cfg.Token = strings.TrimSpace(string(tok))
	cfg.Zones = splitList(*zones)
	cfg.InstanceTypes = splitList(*types)
	cfg.Faults = api.Faults{Latency: api.Duration(*latency), ErrorRate: *errorRate}
	// The state holds the identity keys: its directory, when made here, is
	// the owner's alone. An existing one is left as it is.
	if err := os.MkdirAll(filepath.Dir(cfg.StatePath), 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}

	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	if *addressFile != "" {
		if err := atomicfile.Write(*addressFile, []byte(url+"\n"), 0o644); err != nil {
			return err
		}
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	klog.InfoS("Serving the local cloud API", "url", url)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	klog.InfoS("Shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(shutdown)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
