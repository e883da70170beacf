package servicelb

import (
	"errors"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// flakyServices fails its first failures Lists.
type flakyServices struct {
	corelisters.ServiceLister
	failures atomic.Int32
}

func (f *flakyServices) List(sel labels.Selector) ([]*v1.Service, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("lister broken")
	}
	return f.ServiceLister.List(sel)
}

// A node change whose Service listing fails is not lost: the controller
// lists again and queues the served Services. Before, the error was
// dropped and the load balancers kept their old backends until the next
// change or sweep.
func TestNodeChangeSurvivesAListerError(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	services := factory.Core().V1().Services()
	c, err := New(newFakeCloud(), client, services, factory.Core().V1().Nodes(), Options{ServeUnclassed: true, NodeBatch: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	if err := services.Informer().GetIndexer().Add(lbService("web", nil)); err != nil {
		t.Fatal(err)
	}
	flaky := &flakyServices{ServiceLister: c.services}
	flaky.failures.Store(2)
	c.services = flaky

	c.nodesChanged()
	if c.queue.Len() != 0 {
		t.Fatal("queued although the Services could not be listed")
	}
	eventually(t, "the Service queued after the lister recovered", func() bool { return c.queue.Len() == 1 })
	if left := flaky.failures.Load(); left >= 0 {
		t.Fatalf("the lister was not asked again (%d failures left)", left)
	}
}
