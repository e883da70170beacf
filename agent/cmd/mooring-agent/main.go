// Command mooring-agent takes a node from a fresh boot to a running kubelet
// with approved credentials: it attests the machine to the cluster through
// the CSR API and starts kubelet.service. Run by mooring-agent.service
// (Type=notify). docs/join.md explains the flow. Its subcommand user-data
// renders the cloud-init user-data that installs and configures it.
//
// Exit codes: 0 joined (or already joined), 2 bad configuration, 3 the
// certificate request was denied (the reason is in the log and the unit's
// status), 1 anything else. Bad flags or arguments also exit 2, for the
// join and for user-data.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/version"
	"github.com/mooring-dev/mooring/systemd"

	// Every cloud backend's node identity, registered by name (the config's
	// cloud), without the backends' providers.
	_ "github.com/mooring-dev/mooring/cloud/all/agentid"
)

// Exit codes (see the package comment).
const (
	exitOK        = 0
	exitFailed    = 1
	exitBadConfig = 2
	exitDenied    = 3
)

func main() {
	os.Exit(execute(newCommand(), os.Stderr))
}

// exitError carries a command's exit code. logged: the failure is already
// in the log, so execute prints nothing more; hint follows the message.
type exitError struct {
	code   int
	err    error
	logged bool
	hint   string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a bad flag or argument: exit code 2, with the message and a
// pointer to --help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: exitBadConfig, err: err, hint: fmt.Sprintf("See '%s --help'.", cmd.CommandPath())}
}

// execute runs cmd with component-base's command boilerplate (flag name
// normalization, logging set up before the command runs) and turns its
// error into an exit code.
func execute(cmd *cobra.Command, stderr io.Writer) int {
	err := cli.RunNoErrOutput(cmd)
	if err == nil {
		return exitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: exitFailed, err: err}
	}
	if !e.logged {
		fmt.Fprintf(stderr, "Error: %v\n", e.err)
		if e.code == exitBadConfig {
			// A bad flag in the unit's command line: the unit's STATUS
			// says so too (no-op outside systemd).
			_ = systemd.NewNotifier().Status("bad flags: %v", e.err)
		}
	}
	if e.hint != "" {
		fmt.Fprintln(stderr, e.hint)
	}
	return e.code
}

type joinOptions struct {
	configPath string
	userBus    bool
	noStart    bool
}

// versionAsked reports whether --version was given. The command prints its
// version itself rather than through cobra's Version field: cobra prints
// any format but its own with a text/template, and a template that can run
// keeps every exported method of every type in the binary (the linker
// cannot tell which one it calls), some 8 MB of the agent's.
func versionAsked(cmd *cobra.Command) bool {
	v, err := cmd.Flags().GetBool("version")
	return err == nil && v
}

// newCommand builds mooring-agent: the join, and the user-data subcommand.
func newCommand() *cobra.Command {
	o := joinOptions{}
	logOpts := logs.NewOptions()
	cmd := &cobra.Command{
		Use:   "mooring-agent",
		Short: "Join this machine to a Kubernetes cluster with cloud-attested kubelet credentials",
		Long: `mooring-agent joins this machine to a Kubernetes cluster. It reads its config
(--config), proves to the cluster which cloud instance it runs on with
evidence the cloud signs and binds to the key of a kubelet client CSR, waits
for mooring's approver to approve the CSR, stores the kubelet's certificate,
kubeconfig and flags, and starts kubelet.service. It is run by
mooring-agent.service (Type=notify) on every boot; a node already joined
exits at once.

Exit codes: 0 joined (or already joined), 1 failed (systemd retries),
2 bad configuration or flags, 3 the CSR was denied for good.

"mooring-agent user-data" renders the cloud-init user-data that installs and
configures the agent on a new machine. See docs/join.md.`,
		SilenceUsage: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if versionAsked(cmd) {
				return nil // --version takes any arguments, as cobra's own flag does
			}
			if len(args) > 0 {
				return usageError(cmd, fmt.Errorf("unexpected argument %q (the only subcommand is user-data)", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if versionAsked(cmd) {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "mooring-agent %s\n", version.Get()) // stamped by hack/ldflags.sh
				return err
			}
			if err := logsapi.ValidateAndApply(logOpts, nil); err != nil {
				return usageError(cmd, err)
			}
			if code := join(o); code != exitOK {
				return &exitError{code: code, logged: true}
			}
			return nil
		},
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError(c, err) })
	fs := cmd.Flags()
	fs.StringVar(&o.configPath, "config", agent.DefaultConfigPath, "the agent's config file (docs/join.md lists its fields)")
	fs.BoolVar(&o.userBus, "systemd-user", false, "talk to the user instance of systemd (tests) instead of the system one")
	fs.BoolVar(&o.noStart, "no-start-kubelet", false, "write the kubelet's credentials and settings but do not start its unit")
	fs.Bool("version", false, "print the version and exit")
	fs.BoolP("help", "h", false, "show this help and exit")
	logsapi.AddFlags(logOpts, fs)
	cmd.AddCommand(newUserDataCommand())
	return cmd
}

// join is the agent's job; it returns the exit code, and logs what the run
// took (time, CPU and peak memory) as it ends.
func join(o joinOptions) int {
	began := time.Now()
	defer func() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
			// ru_maxrss is in KiB on Linux.
			klog.InfoS("Agent run ended", "took", time.Since(began).Round(time.Millisecond), "peakRSSKiB", ru.Maxrss,
				"cpu", (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Round(time.Millisecond))
		}
		klog.Flush()
	}()
	notifier := systemd.NewNotifier()
	cfg, err := agent.LoadConfig(o.configPath)
	if err != nil {
		return badConfig(notifier, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	identity, err := nodeid.New(cfg.Cloud, cfg.NodeConfig())
	if err != nil {
		return badConfig(notifier, fmt.Errorf("cloud %s: %w", cfg.Cloud, err))
	}
	a := &agent.Agent{Config: cfg, Identity: identity, Notifier: notifier, Now: agentClock()}
	if !o.noStart && cfg.KubeletUnit != "" {
		dial := systemd.DialSystem
		if o.userBus {
			dial = systemd.DialUser
		}
		conn, err := dial(ctx)
		if err != nil {
			klog.ErrorS(err, "Cannot reach systemd over D-Bus")
			_ = notifier.Status("cannot reach systemd: %v", err)
			return exitFailed
		}
		units := systemd.NewUnits(conn)
		defer units.Close()
		a.Units = units
	}
	stopWatchdog := watchdog(ctx, notifier)
	defer stopWatchdog()
	err = a.Run(ctx)
	var (
		denied *agent.DeniedError
		cfgErr *agent.ConfigError
	)
	switch {
	case errors.As(err, &cfgErr):
		return badConfig(notifier, err)
	case errors.As(err, &denied):
		klog.ErrorS(err, "The join was denied for good; not retrying (a new CSR would be denied for the same reason)",
			"csr", denied.CSR, "reason", denied.Reason)
		_ = notifier.Status("denied: %s: %s", denied.Reason, denied.Message)
		return exitDenied
	case err != nil:
		klog.ErrorS(err, "Join failed")
		_ = notifier.Status("failed: %v", err)
		return exitFailed
	}
	klog.Flush()
	return exitOK
}

// badConfig reports a configuration error (the config, a file it names,
// or a config the cloud cannot serve) in the log and in the unit's STATUS,
// and returns exitBadConfig: the unit does not restart on it
// (RestartPreventExitStatus), since a restart would meet the same error.
func badConfig(n systemd.Notifier, err error) int {
	klog.ErrorS(err, "Bad configuration; not retrying: fix it, then restart the unit (systemctl restart mooring-agent)")
	if serr := n.Status("bad configuration: %v", err); serr != nil {
		klog.ErrorS(serr, "sd_notify")
	}
	return exitBadConfig
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
