package harness

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/internal/ticket"
)

// TicketIssuer is a cluster's join ticket keys, laid out as the mounted
// keys Secret (docs/tickets.md), for tests whose machines join with
// tickets.
type TicketIssuer struct {
	// Dir holds keys.json, public-keys.json and signing-kid.
	Dir string

	mu   sync.Mutex
	keys *ticket.KeySet
}

// NewTicketIssuer makes a key set of one signing key in a temp dir.
func NewTicketIssuer(t testing.TB) *TicketIssuer {
	t.Helper()
	ti := &TicketIssuer{Dir: filepath.Join(t.TempDir(), "join-ticket-keys"), keys: &ticket.KeySet{}}
	if _, err := ti.keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	if err := ti.keys.WriteDir(ti.Dir); err != nil {
		t.Fatal(err)
	}
	return ti
}

// Issue signs a ticket for the instance name of cluster, issued now, valid
// for lifetime (0: the default).
func (ti *TicketIssuer) Issue(name, cluster string, lifetime time.Duration) (string, error) {
	return ti.IssueAt(name, cluster, time.Now(), lifetime)
}

// IssueAt signs a ticket issued at iat (in the past or the future, for
// attacks).
func (ti *TicketIssuer) IssueAt(name, cluster string, iat time.Time, lifetime time.Duration) (string, error) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	tok, _, err := ti.keys.Issue(name, cluster, iat, lifetime)
	return tok, err
}

// KeysFile is the public keys the approver reads (--ticket-keys-file).
func (ti *TicketIssuer) KeysFile() string { return filepath.Join(ti.Dir, ticket.PublicKeysFile) }

// ApproverArgs are mooring-csr-approver's flags that accept these tickets.
func (ti *TicketIssuer) ApproverArgs() []string {
	return []string{"--ticket-keys-file=" + ti.KeysFile()}
}

// CCMArgs are mooring-ccm's flags that make its embedded approver accept
// these tickets.
func (ti *TicketIssuer) CCMArgs() []string {
	return []string{"--csr-approver-ticket-keys-file=" + ti.KeysFile()}
}
