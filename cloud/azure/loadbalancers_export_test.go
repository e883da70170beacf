package azure

import "time"

// SetPIPDeleteWait sets how long a refused public IP deletion waits
// before it is made again, for a test; it returns the old value.
func SetPIPDeleteWait(d time.Duration) time.Duration {
	old := pipDeleteWait
	pipDeleteWait = d
	return old
}
