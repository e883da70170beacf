// Command mooring-agent takes a node from a fresh boot to a running kubelet
// with approved credentials: it attests the machine to the cluster through
// the CSR API and starts kubelet.service. Run by mooring-agent.service
// (Type=notify). docs/join.md explains the flow.
//
// Exit codes: 0 joined (or already joined), 2 bad configuration, 3 the
// certificate request was denied (the reason is in the log and the unit's
// status), 1 anything else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/systemd"

	// Every cloud backend, registered by name (the config's cloud).
	_ "github.com/mooring-dev/mooring/cloud/all"
)

func main() {
	fs := flag.NewFlagSet("mooring-agent", flag.ExitOnError)
	klog.InitFlags(fs)
	configPath := fs.String("config", agent.DefaultConfigPath, "the agent's config file")
	userBus := fs.Bool("systemd-user", false, "talk to the user instance of systemd (tests) instead of the system one")
	noStart := fs.Bool("no-start-kubelet", false, "write credentials and settings but do not start the kubelet unit")
	_ = fs.Parse(os.Args[1:])
	os.Exit(run(*configPath, *userBus, *noStart))
}

func run(configPath string, userBus, noStart bool) int {
	notifier := systemd.NewNotifier()
	cfg, err := agent.LoadConfig(configPath)
	if err != nil {
		klog.ErrorS(err, "Bad configuration")
		_ = notifier.Status("bad configuration: %v", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	identity, err := cloud.NewNodeIdentity(cfg.Cloud, cfg.NodeConfig())
	if err != nil {
		klog.ErrorS(err, "Bad configuration", "field", "cloud")
		_ = notifier.Status("bad configuration: cloud: %v", err)
		return 2
	}
	a := &agent.Agent{Config: cfg, Identity: identity, Notifier: notifier}
	if !noStart && cfg.KubeletUnit != "" {
		dial := systemd.DialSystem
		if userBus {
			dial = systemd.DialUser
		}
		conn, err := dial(ctx)
		if err != nil {
			klog.ErrorS(err, "Cannot reach systemd over D-Bus")
			_ = notifier.Status("cannot reach systemd: %v", err)
			return 1
		}
		units := systemd.NewUnits(conn)
		defer units.Close()
		a.Units = units
	}
	stopWatchdog := watchdog(ctx, notifier)
	defer stopWatchdog()
	err = a.Run(ctx)
	var denied *agent.DeniedError
	switch {
	case errors.As(err, &denied):
		klog.ErrorS(err, "The join was denied for good; not retrying (a new CSR would be denied for the same reason)",
			"csr", denied.CSR, "reason", denied.Reason)
		_ = notifier.Status("denied: %s: %s", denied.Reason, denied.Message)
		return 3
	case err != nil:
		klog.ErrorS(err, "Join failed")
		_ = notifier.Status("failed: %v", err)
		return 1
	}
	klog.Flush()
	return 0
}

// watchdog pets the systemd watchdog while the agent works.
func watchdog(ctx context.Context, n systemd.Notifier) func() {
	interval := n.WatchdogInterval()
	if interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := n.Watchdog(); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
		}
	}()
	return cancel
}
