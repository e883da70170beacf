package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/internal/version"
)

// The test binary doubles as mooring-localcloud when this variable is set,
// so the tests run the real program as a child process without a build step.
const asMain = "MOORING_LOCALCLOUD_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run runs the program with args and returns its stdout; it fails the test
// on a non-zero exit unless wantErr.
func run(t *testing.T, env []string, wantErr bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), asMain+"=1"), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if (err != nil) != wantErr {
		t.Fatalf("%v: err=%v\nstderr: %s", args, err, stderr.String())
	}
	if wantErr {
		return stderr.String()
	}
	return string(out)
}

// daemon starts `serve` on the state file and returns its URL and process.
func daemon(t *testing.T, dir string) (string, *exec.Cmd) {
	t.Helper()
	addr := filepath.Join(dir, "address")
	os.Remove(addr)
	cmd := exec.Command(os.Args[0], "serve",
		"--listen=127.0.0.1:0", "--address-file="+addr,
		"--token-file="+filepath.Join(dir, "token"),
		"--state="+filepath.Join(dir, "state.db"),
		"--internal-cidr=127.61.1.0/24", "--external-cidr=127.61.2.0/24", "--vip-cidr=127.61.3.0/24",
		"--metadata-port=0")
	cmd.Env = append(os.Environ(), asMain+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addr); err == nil {
			return strings.TrimSpace(string(b)), cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("daemon did not write its address")
	return "", nil
}

func TestCLIAndStateSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, cmd := daemon(t, dir)
	env := []string{"MOORING_LOCALCLOUD_URL=" + url, "MOORING_LOCALCLOUD_TOKEN=tok"}

	var in api.Instance
	out := run(t, env, false, "instances", "create", "cli-node", "--cluster", "demo", "--label", "a=b", "-o", "json")
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("create output %q: %v", out, err)
	}
	if in.Name != "cli-node" || in.Cluster != "demo" || in.Labels["a"] != "b" {
		t.Fatalf("created %+v", in)
	}
	if out := run(t, env, false, "instances", "list"); !strings.Contains(out, "cli-node") || !strings.Contains(out, "running") {
		t.Errorf("list table:\n%s", out)
	}
	spec := filepath.Join(dir, "spec.json")
	_ = os.WriteFile(spec, []byte(`{"listeners":[{"port":80,"protocol":"TCP","backends":[{"address":"127.61.9.1","port":8080}]}]}`), 0o644)
	run(t, env, false, "lb", "ensure", "web", "--file", spec)
	run(t, env, false, "routes", "create", "pods-1", "--cidr", "10.244.1.0/24", "--instance", in.ID)
	run(t, env, false, "faults", "set", "--op", "GetInstance=1:500")
	if msg := run(t, env, true, "instances", "get", in.ID); !strings.Contains(msg, "injected fault") {
		t.Errorf("faulted get: %s", msg)
	}
	run(t, env, false, "faults", "clear")
	if out := run(t, env, false, "ratelimit"); !strings.Contains(out, "unlimited") {
		t.Errorf("ratelimit:\n%s", out)
	}
	run(t, env, false, "ratelimit", "--limit", "0.5", "--burst", "1")
	var rl api.RateLimit
	if out := run(t, env, false, "ratelimit", "-o", "json"); json.Unmarshal([]byte(out), &rl) != nil || rl != (api.RateLimit{Limit: 0.5, Burst: 1}) {
		t.Errorf("ratelimit -o json: %s", out)
	}
	run(t, env, false, "instances", "list")
	if msg := run(t, env, true, "instances", "list"); !strings.Contains(msg, "Throttled") {
		t.Errorf("throttled list: %s", msg)
	}
	if msg := run(t, env, true, "ratelimit", "--limit", "-1"); !strings.Contains(msg, "must not be negative") {
		t.Errorf("negative limit: %s", msg)
	}
	if msg := run(t, env, true, "ratelimit", "--burst", "3"); !strings.Contains(msg, "--burst needs --limit") {
		t.Errorf("burst alone: %s", msg)
	}
	if out := run(t, env, false, "ratelimit", "--limit", "0"); !strings.Contains(out, "unlimited") {
		t.Errorf("ratelimit --limit 0:\n%s", out)
	}
	if out := run(t, env, false, "stats"); !strings.Contains(out, "CreateInstance") {
		t.Errorf("stats:\n%s", out)
	}
	if msg := run(t, env, true, "instances", "create", "Bad_Name"); !strings.Contains(msg, "Invalid") {
		t.Errorf("bad name: %s", msg)
	}
	if msg := run(t, env, true, "instances", "frobnicate"); !strings.Contains(msg, "unknown command") {
		t.Errorf("unknown command: %s", msg)
	}
	if out := run(t, env, false, "instances", "create", "quiet", "--metadata-endpoint", "disabled"); !strings.Contains(out, "(disabled)") {
		t.Errorf("created without metadata:\n%s", out)
	}
	if msg := run(t, env, true, "instances", "create", "loud", "--metadata-endpoint", "maybe"); !strings.Contains(msg, "Invalid") {
		t.Errorf("bad --metadata-endpoint: %s", msg)
	}
	if msg := run(t, env, true, "instances", "metadata-endpoint", in.ID, "off"); !strings.Contains(msg, "want enabled or disabled") {
		t.Errorf("metadata-endpoint off: %s", msg)
	}
	if out := run(t, env, false, "instances", "metadata-endpoint", in.ID, "disabled"); !strings.Contains(out, "(disabled)") {
		t.Errorf("metadata-endpoint disabled:\n%s", out)
	}
	if out := run(t, env, false, "instances", "metadata-endpoint", in.ID, "enabled", "-o", "json"); !strings.Contains(out, `"metadataEndpoint": "enabled"`) {
		t.Errorf("metadata-endpoint enabled:\n%s", out)
	}
	tok := run(t, nil, false, "metadata", "token", "--url", in.MetadataURL, "--audience", "x")
	if strings.Count(tok, ".") != 2 {
		t.Errorf("token %q is not a JWT", tok)
	}

	// kill -9, then a new daemon on the same file has everything.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	url, _ = daemon(t, dir)
	c, err := client.New(url, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.GetInstance(ctx, in.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("instance after kill -9: %v %+v", err, got)
	}
	if _, err := client.NewMetadata(got.MetadataURL, nil).Instance(ctx); err != nil {
		t.Errorf("metadata after kill -9: %v", err)
	}
	if _, err := c.GetLoadBalancer(ctx, "web"); err != nil {
		t.Errorf("load balancer after kill -9: %v", err)
	}
	if _, err := c.GetRoute(ctx, "pods-1"); err != nil {
		t.Errorf("route after kill -9: %v", err)
	}
}

func TestServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "token"), []byte("tok"), 0o600)
	if msg := run(t, nil, true, "serve", "--state", filepath.Join(dir, "s.db")); !strings.Contains(msg, "--token-file") {
		t.Errorf("no token file: %s", msg)
	}
	msg := run(t, nil, true, "serve", "--token-file", filepath.Join(dir, "token"), "--state", filepath.Join(dir, "s.db"),
		"--internal-cidr", "10.0.0.0/24")
	if !strings.Contains(msg, "outside the allowed prefixes") {
		t.Errorf("off-machine pool: %s", msg)
	}
}

// TestHelp: help asked for is printed on stdout with exit 0, for the
// program and for each command; no command, or an unknown one, is a usage
// error (exit 2).
func TestHelp(t *testing.T) {
	exec1 := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), asMain+"=1")
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%v: %v", args, err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"help"}} {
		out, errOut, code := exec1(args...)
		if code != 0 || !strings.Contains(out, "usage: mooring-localcloud COMMAND") || !strings.Contains(out, "instances terminate") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"serve", "--help"}, {"instances", "list", "-h"}} {
		_, errOut, code := exec1(args...)
		if code != 0 || !strings.Contains(errOut, "-"+map[string]string{"serve": "listen", "instances": "cluster"}[args[0]]) || strings.Contains(errOut, "help requested") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if out, errOut, code := exec1(args...); code != 0 || out != "mooring-localcloud "+version.Get().String()+"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{nil, {"frobnicate"}} {
		if _, errOut, code := exec1(args...); code != 2 || !strings.Contains(errOut, "usage: mooring-localcloud COMMAND") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// A group of commands: its help lists its commands (and no others).
	for _, args := range [][]string{{"faults", "--help"}, {"faults", "-h"}, {"faults", "help"}} {
		out, errOut, code := exec1(args...)
		if code != 0 || !strings.Contains(out, "usage: mooring-localcloud faults COMMAND") || !strings.Contains(out, "faults set") ||
			strings.Contains(out, "instances list") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if out, _, code := exec1("instances", "--help"); code != 0 || !strings.Contains(out, "instances metadata-endpoint") {
		t.Errorf("instances --help: exit %d, stdout %q", code, out)
	}
	// The group alone, or with an unknown command, is a usage error that
	// lists the group's commands.
	for args, want := range map[string]string{"faults": "mooring-localcloud faults: a command is required", "faults frobnicate": `unknown command "faults frobnicate"`} {
		_, errOut, code := exec1(strings.Fields(args)...)
		if code != 2 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "faults clear") || strings.Contains(errOut, "lb list") {
			t.Errorf("%s: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestTokenErrorsSayWhereTheTokenComesFrom: a call without a token, or
// with one the API refuses, names $MOORING_LOCALCLOUD_TOKEN and
// --token-file (and which of them gave the refused token).
func TestTokenErrorsSayWhereTheTokenComesFrom(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ := daemon(t, dir)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"MOORING_LOCALCLOUD_TOKEN="}, []string{"instances", "list"},
			"no API token given: set $MOORING_LOCALCLOUD_TOKEN, or --token-file FILE"},
		{[]string{"MOORING_LOCALCLOUD_TOKEN="}, []string{"instances", "get", "i-1"},
			"no API token given: set $MOORING_LOCALCLOUD_TOKEN, or --token-file FILE"},
		{[]string{"MOORING_LOCALCLOUD_TOKEN=nope"}, []string{"faults", "get"},
			"the API refused the token from $MOORING_LOCALCLOUD_TOKEN"},
		{[]string{"MOORING_LOCALCLOUD_TOKEN=tok"}, []string{"faults", "get", "--token-file", wrong},
			"the API refused the token from --token-file " + wrong},
		{nil, []string{"faults", "get", "--token-file", filepath.Join(dir, "none")},
			"--token-file: open " + filepath.Join(dir, "none")},
	} {
		msg := run(t, append([]string{"MOORING_LOCALCLOUD_URL=" + url}, c.env...), true, c.args...)
		if !strings.Contains(msg, c.want) {
			t.Errorf("%v %v: stderr %q, want %q", c.env, c.args, msg, c.want)
		}
		if strings.Contains(msg, "Unauthorized") && !strings.Contains(msg, "a valid bearer token is required") {
			t.Errorf("%v %v: the API's own message is lost: %q", c.env, c.args, msg)
		}
	}
	// The right token works.
	run(t, []string{"MOORING_LOCALCLOUD_URL=" + url, "MOORING_LOCALCLOUD_TOKEN=tok"}, false, "faults", "get")
}

// TestServeCreatesTheStateDirectory: --state in a directory that does not
// exist (as docs/localcloud.md's /var/lib/mooring/localcloud.db on a fresh
// machine) creates it, mode 0700, and serves.
func TestServeCreatesTheStateDirectory(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "token"), []byte("tok"), 0o600)
	state := filepath.Join(dir, "var", "lib", "mooring", "localcloud.db")
	addr := filepath.Join(dir, "address")
	cmd := exec.Command(os.Args[0], "serve", "--listen=127.0.0.1:0", "--address-file="+addr,
		"--token-file="+filepath.Join(dir, "token"), "--state="+state,
		"--internal-cidr=127.61.4.0/24", "--external-cidr=127.61.5.0/24", "--vip-cidr=127.61.6.0/24")
	cmd.Env = append(os.Environ(), asMain+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(addr); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not write its address\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("state file: %v", err)
	}
	for _, d := range []string{"var", "var/lib", "var/lib/mooring"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want a directory with mode 0700", d, fi.Mode(), err)
		}
	}
}
