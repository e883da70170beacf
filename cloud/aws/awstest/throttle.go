package awstest

import "github.com/mooring-dev/mooring/cloud/cloudtest"

// Bucket is a token bucket of EC2's request rate limiting (EC2 Developer
// Guide, "Request throttling for the Amazon EC2 API"): each call of its
// action takes a token; a call that finds none is throttled
// (RequestLimitExceeded, HTTP 503); Refill tokens come back each second,
// up to Size.
type Bucket = cloudtest.Bucket

// DefaultBuckets are the request rate limits AWS documents as the default
// for the EC2 actions modelled: non-mutating (Describe*) actions have a
// bucket of 100 tokens each, refilled by 20 a second.
func DefaultBuckets() map[string]Bucket {
	describe := Bucket{Size: 100, Refill: 20}
	return map[string]Bucket{
		ActionDescribeInstances:         describe,
		ActionDescribeAvailabilityZones: describe,
		ActionDescribeInstanceTopology:  describe,
	}
}

// Throttle turns request rate limiting on, with buckets by action (nil:
// DefaultBuckets), each starting full; an action without a bucket is never
// throttled. Throttle(nil) after Throttle(b) refills every bucket.
// Throttling is off until Throttle is called (or Options.Throttle).
func (c *Cloud) Throttle(buckets map[string]Bucket) {
	if buckets == nil {
		buckets = DefaultBuckets()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buckets = map[string]*cloudtest.Bucket{}
	for action, b := range buckets {
		c.buckets[action] = &cloudtest.Bucket{Size: b.Size, Refill: b.Refill}
	}
}

// NoThrottle turns request rate limiting off.
func (c *Cloud) NoThrottle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buckets = nil
}

// Throttled is how many calls of action were throttled.
func (c *Cloud) Throttled(action string) int { return c.throttled.Get(action) }

// takeTokenLocked takes a token of action's bucket, refilled to Now; false
// (counted) when there is none.
func (c *Cloud) takeTokenLocked(action string) bool {
	b := c.buckets[action]
	if b == nil {
		return true
	}
	if !b.Take(c.now()) {
		c.throttled.Add(action)
		return false
	}
	return true
}
