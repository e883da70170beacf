package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// asMain makes the test binary run mooring-agent's main: logging can be
// set up once in a process, so each run of the join is a process of its
// own.
const asMain = "MOORING_AGENT_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// runAgent runs mooring-agent with args in a child process (the test
// binary as main), with the test's environment (NOTIFY_SOCKET), and
// returns its stderr (the log) and exit code.
func runAgent(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	// An agent that retries instead of stopping is killed after a while.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return errOut.String(), code
}

// notifySocket points NOTIFY_SOCKET at a socket of the test's and returns
// a function that gives the STATUS values sent so far.
func notifySocket(t *testing.T) func() []string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "")
	return func() []string {
		var status []string
		buf := make([]byte, 8192)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := conn.Read(buf)
			if err != nil {
				return status
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if v, ok := strings.CutPrefix(line, "STATUS="); ok {
					status = append(status, v)
				}
			}
		}
	}
}

// TestConfigErrorsExit2: every configuration error the agent can meet at
// start (the config file, a file it names, the cloud's part, a cloud that
// needs a join ticket without one) exits 2, with the reason in the log and
// in the unit's STATUS, while the metadata service cannot be
// reached (loopback port 1): the agent stops at once instead of retrying.
// Exit 2 is in the unit's RestartPreventExitStatus (systemd/units
// TestBadConfigIsNotRestarted runs it in a real systemd).
func TestConfigErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	caFile := writeCA(t, dir)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", token+"\n")
	badToken := write("bad-token", "abcdef-0123456789abcdef\n")
	notPEM := write("not-pem.crt", "not a certificate\n")
	emptyTicket := write("empty-ticket", "\n")
	certDir := filepath.Join(dir, "pki")
	// good is a config that loads; each case changes one line.
	good := map[string]string{
		"apiServer": "https://127.0.0.1:6443", "caFile": caFile, "bootstrapTokenFile": tokenFile, "cloud": "local",
		"metadataURL": "http://127.0.0.1:1", "certDir": certDir, "kubeconfig": filepath.Join(dir, "kubelet.conf"),
		"kubeletEnvFile": filepath.Join(dir, "kubelet.env"), "kubeletConfigFile": filepath.Join(dir, "config.yaml"),
	}
	config := func(change ...string) string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		for i := 0; i+1 < len(change); i += 2 {
			if change[i+1] == "" {
				delete(m, change[i])
			} else {
				m[change[i]] = change[i+1]
			}
		}
		var b strings.Builder
		for k, v := range m {
			b.WriteString(k + ": " + v + "\n")
		}
		return b.String()
	}
	for _, c := range []struct {
		name, config, want string
	}{
		{"config file missing", "", "agent config: open " + filepath.Join(dir, "missing.yaml")},
		{"invalid YAML", "apiServer: [https://x\n", "agent config"},
		{"unknown field", config() + "apiServr: https://x\n", `unknown field "apiServr"`},
		{"apiServer not https", config("apiServer", "http://127.0.0.1:6443"), "apiServer: want an https:// URL"},
		{"apiServer without a host", config("apiServer", "https://"), "apiServer: want an https:// URL"},
		{"no CA", config("caFile", ""), "caFile or caCertHash: one is required"},
		{"bad caCertHash", config("caFile", "", "caCertHash", "sha256:00"), "caCertHash: want sha256:<64 hex digits>"},
		{"unknown cloud", config("cloud", "nimbus"), `cloud: "nimbus" is not supported here`},
		{"bad cloud settings", config() + "cloudSettings: {region: x}\n", "cloud local: local cloud: cloudSettings"},
		{"bad node name policy", config("nodeNamePolicy", "Bogus"), "cloud local:"},
		{"metadata URL not a URL", config("metadataURL", "127.0.0.1:8169"), "metadataURL: want an http(s) URL"},
		{"metadata URL without a host", config("metadataURL", "http://"), "metadataURL: want an http(s) URL"},
		{"metadata URL missing", config("metadataURL", ""), "metadataURL is required"},
		{"relative path", config("certDir", "pki"), "certDir: want an absolute path"},
		{"token file missing", config("bootstrapTokenFile", filepath.Join(dir, "none")), "bootstrapTokenFile: open " + filepath.Join(dir, "none")},
		{"token malformed", config("bootstrapTokenFile", badToken), "bootstrapTokenFile " + badToken + ": not a bootstrap token"},
		{"token malformed, caCertHash", config("caFile", "", "caCertHash", caHash, "bootstrapTokenFile", badToken), "not a bootstrap token"},
		{"CA file missing", config("caFile", filepath.Join(dir, "none.crt")), "caFile: open " + filepath.Join(dir, "none.crt")},
		{"CA file not PEM", config("caFile", notPEM), "caFile " + notPEM + ":"},
		{"ticket file missing", config("joinTicketFile", filepath.Join(dir, "none")), "joinTicketFile: open " + filepath.Join(dir, "none")},
		{"ticket file empty", config("joinTicketFile", emptyTicket), "joinTicketFile: " + emptyTicket + " is empty"},
		// The metadata service on loopback, should the check not stop it.
		{"no ticket on a cloud that signs nothing", config("cloud", "hetzner"), "joinTicketFile: required to join on the hetzner cloud"},
	} {
		t.Run(c.name, func(t *testing.T) {
			statuses := notifySocket(t)
			path := filepath.Join(dir, "missing.yaml")
			if c.config != "" {
				path = write("agent.yaml", c.config)
			}
			began := time.Now()
			stderr, code := runAgent(t, "--config="+path, "--no-start-kubelet")
			if code != exitBadConfig {
				t.Fatalf("exit %d, want 2\n%s", code, stderr)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("took %v: it retried", took)
			}
			quoted := strconv.Quote(c.want) // as klog writes err="..."
			if !strings.Contains(stderr, `"Bad configuration; not retrying`) || !strings.Contains(stderr, quoted[1:len(quoted)-1]) {
				t.Errorf("the log does not give the reason %q:\n%s", c.want, stderr)
			}
			got := statuses()
			if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "bad configuration: ") || !strings.Contains(got[len(got)-1], c.want) {
				t.Fatalf("STATUS %q, want the last to be the bad configuration with %q", got, c.want)
			}
			if strings.Contains(strings.Join(got, "\n"), strings.TrimSpace(token)) {
				t.Fatal("a STATUS holds the token")
			}
		})
	}
}

// TestBadFlagsInTheUnitSetTheStatus: a bad flag on the agent's command
// line exits 2 and says so in STATUS too.
func TestBadFlagsInTheUnitSetTheStatus(t *testing.T) {
	statuses := notifySocket(t)
	if _, stderr, code := runCLI(t, "--bogus"); code != exitBadConfig || !strings.Contains(stderr, "unknown flag: --bogus") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if got := statuses(); len(got) != 1 || got[0] != "bad flags: unknown flag: --bogus" {
		t.Fatalf("STATUS %q", got)
	}
}
