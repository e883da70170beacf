package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// The suite passes on a backend that keeps the kit's promises: the toy
// cloud below, a map behind the kit, with offset pages. It verifies no
// evidence: its machines join with tickets, and Run runs that contract
// too.
func TestToyBackendConforms(t *testing.T) {
	conformance.Run(t, toyBackend(""))
}

// The suite fails a flawed backend: the toy with one flaw, run as a child
// test process, whose failure is the point. errors-as-absent lists what it
// got before a failure, with no error, and takes a failed lookup of one
// instance for the cloud's "no such instance"; get-error-as-absent does the
// latter alone; no-relist keeps a list whose pages shifted while it was
// read.
func TestSuiteFailsFlawedBackends(t *testing.T) {
	if flaw := os.Getenv("MOORING_CONFORMANCE_FLAW"); flaw != "" {
		conformance.RunInstances(t, toyBackend(flaw))
		return
	}
	for flaw, failing := range map[string][]string{
		"errors-as-absent":    {"Failures", "PageFails"},
		"get-error-as-absent": {"Failures"},
		"no-relist":           {"ListChangesBetweenPages"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteFailsFlawedBackends$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "MOORING_CONFORMANCE_FLAW="+flaw)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Errorf("%s: the suite passed it (%v):\n%s", flaw, err, out)
			continue
		}
		for _, sub := range []string{"Faces", "Metadata", "States", "Deleted", "Pages"} {
			if !slices.Contains(failing, sub) && !strings.Contains(string(out), "--- PASS: TestSuiteFailsFlawedBackends/"+sub+" ") {
				t.Errorf("%s: subtest %s failed on what the backend does right:\n%s", flaw, sub, out)
			}
		}
		for _, sub := range failing {
			if !strings.Contains(string(out), "--- FAIL: TestSuiteFailsFlawedBackends/"+sub+" ") {
				t.Errorf("%s: subtest %s did not fail:\n%s", flaw, sub, out)
			}
		}
	}
}

func toyBackend(flaw string) conformance.Backend {
	return conformance.Backend{
		Name:           "toy",
		BadProviderIDs: []string{"toy://", "toy://x", "toy://-1", "toy:///1"},
		Routes:         true,
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			c := &toyCloud{pageSize: o.PageSize, flaw: flaw, ins: map[int]*toyInstance{}, next: 100, first: 100,
				routes: map[string]toyRoute{}}
			if c.pageSize == 0 {
				c.pageSize = 100
			}
			c.view = view.New(c, view.Options{MinRefreshInterval: time.Millisecond, MaxFailureBackoff: time.Millisecond})
			c.Base = kit.NewBase(kit.Options{Name: "toy", View: c.view, ClusterTag: "c1", Finder: c,
				ProviderID: func(id string) (string, error) { _, err := parseToyID(id); return id, err }})
			return c
		},
	}
}

type toyInstance struct {
	conformance.Spec
	id    int
	state view.State
}

// toyCloud is the toy's cloud, its provider and its bed at once.
type toyCloud struct {
	kit.Base
	kit.InstancesOnly
	view *view.View

	mu             sync.Mutex
	ins            map[int]*toyInstance
	next, version  int
	first          int // the lowest id so far
	pageSize       int
	fail           conformance.Failure
	before         func(int)
	lists, confirm int
	flaw           string
	routes         map[string]toyRoute // by destination (routes_test.go)
	failRoute      conformance.Call    // FailCall's
}

func parseToyID(providerID string) (int, error) {
	s, ok := strings.CutPrefix(providerID, "toy://")
	id, err := strconv.Atoi(s)
	if !ok || err != nil || id <= 0 || strconv.Itoa(id) != s {
		return 0, fmt.Errorf("%q is no toy providerID", providerID)
	}
	return id, nil
}

func (c *toyCloud) toView(in *toyInstance) view.Instance {
	out := view.Instance{ProviderID: fmt.Sprintf("toy://%d", in.id), ID: strconv.Itoa(in.id), Name: in.Name,
		Region: "toy-1", InstanceType: "small", Cluster: "c1", State: in.state, Created: in.Created,
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("127.0.90.%d", in.N)}}}
	if n := strings.ToLower(in.Name); len(validation.IsDNS1123Subdomain(n)) == 0 {
		out.NodeName = n
	}
	return out
}

// ListInstances lists by offset, page by page; a list that changed
// between pages is asked again, up to three times.
func (c *toyCloud) ListInstances(ctx context.Context) ([]view.Instance, error) {
	for range 3 {
		var out []view.Instance
		start := -1
		changed := false
		for page := 1; ; page++ {
			c.mu.Lock()
			before := c.before
			c.mu.Unlock()
			if before != nil {
				before(page)
			}
			c.mu.Lock()
			c.lists++
			if c.fail != "" && c.fail != conformance.GetFails {
				c.mu.Unlock()
				if c.flaw == "errors-as-absent" {
					return out, nil
				}
				return nil, fmt.Errorf("toy: page %d: %s", page, c.fail)
			}
			if start < 0 {
				start = c.version
			}
			changed = changed || c.version != start
			var ids []int
			for id := range c.ins {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			from := (page - 1) * c.pageSize
			last := from+c.pageSize >= len(ids)
			for _, id := range ids[min(from, len(ids)):min(from+c.pageSize, len(ids))] {
				if in := c.ins[id]; !in.Foreign {
					out = append(out, c.toView(in))
				}
			}
			c.mu.Unlock()
			if last {
				break
			}
		}
		if !changed || c.flaw == "no-relist" {
			return out, nil
		}
	}
	return nil, errors.New("toy: the list changed at every attempt")
}

func (c *toyCloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := parseToyID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirm++
	if c.fail != "" {
		if c.flaw == "errors-as-absent" || c.flaw == "get-error-as-absent" {
			return view.Instance{}, &kit.AbsentError{ID: providerID}
		}
		return view.Instance{}, fmt.Errorf("toy: get %d: %s", id, c.fail)
	}
	in, ok := c.ins[id]
	switch {
	case !ok:
		return view.Instance{}, &kit.AbsentError{ID: providerID}
	case in.Foreign:
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: "is another cluster's"}
	}
	return c.toView(in), nil
}

func (c *toyCloud) Provider() conformance.Provider { return c }

func (c *toyCloud) Make(t testing.TB, s conformance.Spec) conformance.Made {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	if s.Created.IsZero() {
		s.Created = time.Now().Truncate(time.Second)
	}
	id := c.next + 1
	if s.First {
		id = c.first - 1
	}
	c.next, c.first = max(c.next, id), min(c.first, id)
	in := &toyInstance{Spec: s, id: id, state: view.StateRunning}
	c.ins[in.id] = in
	v := c.toView(in)
	return conformance.Made{Spec: s, ProviderID: v.ProviderID, ID: v.ID, NodeName: v.NodeName, InternalIP: v.Addresses[0].Address}
}

func (c *toyCloud) Delete(t testing.TB, m conformance.Made) {
	id, err := parseToyID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	delete(c.ins, id)
}

func (c *toyCloud) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	id, err := parseToyID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ins[id].state = s
	return true
}

func (c *toyCloud) Fail(t testing.TB, f conformance.Failure) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = f
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.fail = ""
	}
}

func (c *toyCloud) Calls(k conformance.Call) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k == conformance.List {
		return c.lists
	}
	return c.confirm
}

func (c *toyCloud) BeforePage(f func(int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = f
}
