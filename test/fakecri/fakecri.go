// Package fakecri runs a fake container runtime (CRI) server for a real
// kubelet, so that a kubelet can register, report Ready, renew its lease and
// rotate certificates on a machine with no container runtime. Pods it "runs"
// are fake: their reported IP must never be connected to.
//
// It wraps k8s.io/cri-client/pkg/fake with the settings a kubelet needs to
// start: a cgroupfs cgroup driver, a non-zero image size and a filesystem
// usage for the image filesystem.
package fakecri

import (
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// Server is one fake runtime listening on a unix socket.
type Server struct {
	runtime  *fake.RemoteRuntime
	endpoint string
}

// Start serves a fake runtime on the unix socket at socketPath. fsMount is
// the directory reported as the image filesystem (for example the kubelet's
// root directory).
func Start(socketPath, fsMount string) (*Server, error) {
	rt := fake.NewFakeRemoteRuntime()
	rt.ImageService.SetFakeImageSize(100 << 20)
	rt.ImageService.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: fsMount},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 100 << 20},
		InodesUsed: &runtimeapi.UInt64Value{Value: 100},
	}})
	rt.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}
	endpoint := "unix://" + socketPath
	if err := rt.Start(endpoint); err != nil {
		return nil, fmt.Errorf("fakecri: %w", err)
	}
	return &Server{runtime: rt, endpoint: endpoint}, nil
}

// Endpoint is the address to give the kubelet as --container-runtime-endpoint.
func (s *Server) Endpoint() string { return s.endpoint }

// Stop stops serving; it does not remove the socket file.
func (s *Server) Stop() { s.runtime.Stop() }
