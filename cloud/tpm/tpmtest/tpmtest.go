// Package tpmtest gives tests a TPM: a mooring-tpmsim process (this
// package's command, go-tpm-tools' simulator behind a Unix socket) per Sim,
// so a test can have as many TPMs as machines, each with its own seeds,
// where the simulator library allows one per process. The socket is what
// node.Open and mooring-agent's tpmDevice take. Provision writes NV indexes
// as a cloud provisions its vTPMs (GCE's AK template and certificate), and
// EKPublic and PublicArea read the keys' public areas as a cloud's API
// would report them.
//
// The command links the simulator with cgo (it needs gcc; make deps
// installs it). It is built for tests only: neither mooring's binaries nor
// its release contain it.
package tpmtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

// Pkg is the simulator command's package, relative to the checkout.
const Pkg = "cloud/tpm/tpmtest/cmd/mooring-tpmsim"

// SocketName is the socket's name in the directory Start is given.
const SocketName = "tpm.sock"

// Sim is one running simulator.
type Sim struct {
	// Dir is the directory holding the socket (and the simulator's log),
	// which a booted machine gets bind-mounted; Socket is the socket.
	Dir, Socket string
	pid         int
	done        chan struct{}
	log         string
}

// Start runs a simulator with its socket in dir (which must exist; the
// socket must not), waits until it answers, and stops it (by its PID) when
// the test ends, whether it passed or not.
func Start(t testing.TB, dir string) *Sim {
	t.Helper()
	s, err := Run(Binary(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Run is Start outside a test, with the simulator command bin (Binary):
// the caller stops the simulator (Stop). On an error nothing is left
// running.
func Run(bin, dir string) (*Sim, error) {
	// A Unix socket's path has room for 107 bytes (sun_path).
	if p := filepath.Join(dir, SocketName); len(p) > 107 {
		return nil, fmt.Errorf("tpmtest: socket path %s is %d bytes, more than a Unix socket takes (107)", p, len(p))
	}
	s := &Sim{Dir: dir, Socket: filepath.Join(dir, SocketName), log: filepath.Join(dir, "mooring-tpmsim.log"), done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--socket", s.Socket)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return nil, fmt.Errorf("start mooring-tpmsim: %w", err)
	}
	s.pid = cmd.Process.Pid
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", s.Socket); err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(s.log)
			return nil, fmt.Errorf("mooring-tpmsim exited at start: %s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("mooring-tpmsim: no socket at %s after 30s", s.Socket)
		}
	}
}

// Stop stops the simulator (SIGTERM, then SIGKILL after 5 s) and waits
// for it; its TPM's state is gone. Stopping twice is harmless.
func (s *Sim) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		<-s.done
	}
	_ = os.Remove(s.Socket)
}

// PID is the simulator process's.
func (s *Sim) PID() int { return s.pid }

// Open opens the TPM as the agent does (node.Open on the socket).
func (s *Sim) Open() (io.ReadWriteCloser, error) { return node.Open(s.Socket) }

// Provision writes data into the NV index idx of this TPM (WriteNV), as a
// cloud provisions its vTPM before the machine boots.
func (s *Sim) Provision(idx uint32, data []byte) error {
	rw, err := s.Open()
	if err != nil {
		return err
	}
	defer rw.Close()
	return WriteNV(rw, idx, data)
}

// WriteNV defines the NV index idx of the TPM rw as the owner's (owner read
// and write, readable with the owner's empty auth, as go-tpm-tools' client
// and the guests read the clouds' indexes) and writes data into it, in
// chunks the TPM takes (TPM_PT_NV_BUFFER_MAX); an index that exists is
// replaced. The test endpoints provision their clouds' vTPMs with it.
func WriteNV(rw io.ReadWriter, idx uint32, data []byte) error {
	if len(data) == 0 || len(data) > 0xffff {
		return fmt.Errorf("NV index %#x: %d bytes", idx, len(data))
	}
	h := tpmutil.Handle(idx)
	if _, err := tpm2.NVReadPublic(rw, h); err == nil {
		if err := tpm2.NVUndefineSpace(rw, "", tpm2.HandleOwner, h); err != nil {
			return fmt.Errorf("NV index %#x: undefine: %w", idx, err)
		}
	}
	attrs := tpm2.AttrOwnerWrite | tpm2.AttrOwnerRead | tpm2.AttrAuthRead | tpm2.AttrNoDA
	if err := tpm2.NVDefineSpace(rw, tpm2.HandleOwner, h, "", "", nil, attrs, uint16(len(data))); err != nil {
		return fmt.Errorf("NV index %#x: define %d bytes: %w", idx, len(data), err)
	}
	chunk, err := nvBufferMax(rw)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		if err := tpm2.NVWrite(rw, tpm2.HandleOwner, h, "", data[off:end], uint16(off)); err != nil {
			return fmt.Errorf("NV index %#x: write at %d: %w", idx, off, err)
		}
	}
	return nil
}

// nvBufferMax is TPM_PT_NV_BUFFER_MAX, the most one NV write takes.
func nvBufferMax(rw io.ReadWriter) (int, error) {
	vals, _, err := tpm2.GetCapability(rw, tpm2.CapabilityTPMProperties, 1, uint32(tpm2.NVMaxBufferSize))
	if err != nil {
		return 0, fmt.Errorf("TPM_PT_NV_BUFFER_MAX: %w", err)
	}
	if len(vals) != 1 {
		return 0, errors.New("TPM_PT_NV_BUFFER_MAX: no value")
	}
	p, ok := vals[0].(tpm2.TaggedProperty)
	if !ok || p.Tag != tpm2.NVMaxBufferSize || p.Value == 0 {
		return 0, fmt.Errorf("TPM_PT_NV_BUFFER_MAX: got %v", vals[0])
	}
	return int(p.Value), nil
}

// EKPublic is the TPMT_PUBLIC of the TPM's RSA endorsement key (the TCG
// default template), as EC2's GetInstanceTpmEkPub or a cloud's EK
// certificate names it.
func (s *Sim) EKPublic() ([]byte, error) {
	return s.PublicArea(node.Key{Load: client.EndorsementKeyRSA})
}

// PublicArea is the TPMT_PUBLIC of the key k loads in this TPM (say the AK
// a cloud certifies).
func (s *Sim) PublicArea(k node.Key) ([]byte, error) {
	rw, err := s.Open()
	if err != nil {
		return nil, err
	}
	defer rw.Close()
	key, err := k.Load(rw)
	if err != nil {
		return nil, err
	}
	defer key.Close()
	return key.PublicArea().Encode()
}

// build holds the command Binary built, once for the test process after
// ShareBuild, or once for each test otherwise.
var build struct {
	mu  sync.Mutex
	dir string
	bin string
}

// ShareBuild makes Binary build the command once for the test process,
// into dir (which the caller removes after the tests), instead of into
// each test's temp dir: a package's TestMain calls it (test/harness's
// ShareBuilds does).
func ShareBuild(dir string) {
	build.mu.Lock()
	defer build.mu.Unlock()
	build.dir, build.bin = dir, ""
}

// Binary builds mooring-tpmsim (with cgo) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.bin != "" {
		return build.bin
	}
	dir := build.dir
	if dir == "" {
		dir = t.TempDir()
	}
	out, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if build.dir != "" {
		build.bin = out
	}
	return out
}

// Build builds mooring-tpmsim (with cgo) into dir and returns its path.
func Build(dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(Pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+Pkg)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		hint := ""
		if _, err := exec.LookPath("gcc"); err != nil {
			hint = " (no gcc: `make deps` installs it)"
		}
		return "", fmt.Errorf("go build %s%s: %v\n%s", Pkg, hint, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// repoRoot is the checkout this package was built from.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}
