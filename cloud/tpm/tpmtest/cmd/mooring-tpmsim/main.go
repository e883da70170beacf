// Command mooring-tpmsim serves one go-tpm-tools TPM simulator (Microsoft's
// reference TPM 2.0, linked with cgo) on a Unix socket, for tests: it
// stands in for a machine's vTPM. It speaks the framing go-tpm's
// tpmutil.OpenTPM uses for a socket (tpmutil.EmulatorReadWriteCloser): a
// client connects, writes one command, reads one response, and closes. So
// node.Open (and mooring-agent's tpmDevice) can point at the socket.
//
// One simulator per process (the library allows no more): a test that
// wants several TPMs runs several of these (cloud/tpm/tpmtest.Start). It is
// a test tool, never part of a release; built without cgo it exits with an
// error at start.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-tpm-tools/simulator"
)

// Bounds of one command: a TPM 2.0 command header is 10 bytes (tag,
// commandSize, commandCode) and no command of the reference TPM is larger
// than its 4 KiB buffer.
const (
	headerSize = 10
	maxCommand = 4096
	ioTimeout  = 30 * time.Second
)

func main() {
	socket := flag.String("socket", "", "the Unix socket to serve the simulator on (required; must not exist)")
	flag.Parse()
	if *socket == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: mooring-tpmsim --socket PATH")
		os.Exit(2)
	}
	if err := run(*socket); err != nil {
		fmt.Fprintln(os.Stderr, "mooring-tpmsim:", err)
		os.Exit(1)
	}
}

func run(socket string) error {
	sim, err := simulator.Get()
	if err != nil {
		return fmt.Errorf("start the simulator: %w", err)
	}
	defer sim.Close()
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	// Anyone on the machine may use the TPM through the socket, as the
	// node's root-owned agent does through a bind mount in a container.
	if err := os.Chmod(socket, 0o666); err != nil {
		l.Close()
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		// One command at a time: the simulator is not safe for concurrent
		// use, and a TPM runs its commands one by one anyway.
		if err := serve(sim, c); err != nil {
			fmt.Fprintln(os.Stderr, "mooring-tpmsim: a command:", err)
		}
	}
}

// serve runs the one command a connection carries and writes its response
// in one write (the client reads it with one read).
func serve(sim *simulator.Simulator, c net.Conn) error {
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return err
	}
	cmd := make([]byte, headerSize, maxCommand)
	if _, err := io.ReadFull(c, cmd); err != nil {
		return fmt.Errorf("read the header: %w", err)
	}
	size := binary.BigEndian.Uint32(cmd[2:6])
	if size < headerSize || size > maxCommand {
		return fmt.Errorf("command size %d out of range [%d, %d]", size, headerSize, maxCommand)
	}
	cmd = cmd[:size]
	if _, err := io.ReadFull(c, cmd[headerSize:]); err != nil {
		return fmt.Errorf("read the command: %w", err)
	}
	if _, err := sim.Write(cmd); err != nil {
		return err
	}
	resp, err := io.ReadAll(sim)
	if err != nil {
		return err
	}
	_, err = c.Write(resp)
	return err
}
