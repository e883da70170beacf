// Command pause is the test bed's pod sandbox image for nodes that run real
// pods (testbed.NodeConfig.Containerd): the test machine reaches no image
// registry, so containerd's sandbox image is built here and imported. It
// holds the pod's namespaces by doing nothing until SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
