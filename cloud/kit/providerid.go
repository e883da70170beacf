package kit

import (
	"fmt"
	"strconv"
	"strings"
)

// NumericProviderID reads a providerID of the form <prefix><n> whose n is
// a positive decimal number written as such: no sign, no leading zero, no
// space, within int64 (a DigitalOcean droplet's, a Linode's, a Hetzner
// Cloud server's id). So one instance has one providerID, and the view,
// indexed by it, finds it under that one. Its errors wrap notOurs and name
// the form (<prefix><what>).
func NumericProviderID(providerID, prefix, what string, notOurs error) (int64, error) {
	rest, ok := strings.CutPrefix(providerID, prefix)
	if !ok {
		return 0, fmt.Errorf("%w: %q: want %s<%s>", notOurs, providerID, prefix, what)
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != rest {
		return 0, fmt.Errorf("%w: %q: want %s<%s>, a positive decimal number", notOurs, providerID, prefix, what)
	}
	return id, nil
}
