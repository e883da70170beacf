package ocitest

import "github.com/mooring-dev/mooring/cloud/cloudtest"

// hooks are the functions a test sets for the endpoint to run as it works.
type hooks struct {
	beforePage cloudtest.Hook[int]
}

// BeforePage sets f, run with the page's number (from 1) before each page
// of ListInstances is answered (before its faults are taken), outside the
// endpoint's locks: f may put, delete and fail. nil clears it.
func (c *Cloud) BeforePage(f func(page int)) { c.beforePage.Set(f) }
