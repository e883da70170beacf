package cloudtest

import "sync"

// Counter counts an endpoint's calls by method (or anything else by name:
// refusals, throttled calls). The zero value is ready; it is safe for
// concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one of name.
func (c *Counter) Add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

// Get is how many of name were counted.
func (c *Counter) Get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// Call counts a call of method (of that page of a list; 0: any call) and
// takes from faults the fault it is to answer: nil when none.
func (c *Counter) Call(faults *Faults, method string, page int) *Fault {
	c.Add(method)
	return faults.Take(method, page)
}

// Fault is a failure a test injects: the next Left calls of a method (of
// one page of a list, with Page) are answered Status with the error Code.
type Fault struct {
	// Page limits it to that page of a list; 0: any call.
	Page   int
	Left   int
	Status int
	Code   string
}

// Answer is the HTTP status the fault makes a call answer: 0 when f is
// nil (no fault).
func (f *Fault) Answer() int {
	if f == nil {
		return 0
	}
	return f.Status
}

// Faults are the faults injected into an endpoint's methods, used up in
// the order they were added. The zero value is ready; it is safe for
// concurrent use.
type Faults struct {
	mu sync.Mutex
	q  map[string][]*Fault
}

// Add queues f behind the method's other faults; a fault with Left <= 0
// clears the method's queue instead.
func (fs *Faults) Add(method string, f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.Left <= 0 {
		delete(fs.q, method)
		return
	}
	if fs.q == nil {
		fs.q = map[string][]*Fault{}
	}
	fs.q[method] = append(fs.q[method], &f)
}

// Clear drops what is left of the method's faults.
func (fs *Faults) Clear(method string) { fs.Add(method, Fault{}) }

// Set replaces the method's faults with f (Left <= 0: none).
func (fs *Faults) Set(method string, f Fault) {
	fs.Clear(method)
	fs.Add(method, f)
}

// Take uses up one call of the method's first fault that applies to page
// (a fault without Page applies to every call) and returns it; nil when
// none does.
func (fs *Faults) Take(method string, page int) *Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	q := fs.q[method]
	for i, f := range q {
		if f.Page != 0 && f.Page != page {
			continue
		}
		f.Left--
		if f.Left == 0 {
			q = append(q[:i:i], q[i+1:]...)
			if len(q) == 0 {
				delete(fs.q, method)
			} else {
				fs.q[method] = q
			}
		}
		out := *f
		return &out
	}
	return nil
}
