// Package spent records join tickets as spent, in the apiserver, until
// they expire.
//
// A join ticket is not bound to a key, so whoever reads it can present it
// again under a new key. The CSRs the apiserver holds show earlier uses only
// while they exist, and kube-controller-manager's CSR cleaner deletes decided
// ones after about an hour, while a ticket may live a day. So the approver
// writes each ticket it approves into one of Shards ConfigMaps in its
// namespace before it approves, and a ticket found there under another CSR
// is spent. The state survives CSR deletion, approver restarts and leader
// changes; writes are compare-and-swap on the ConfigMap's resourceVersion,
// so two approvers (a leader change) cannot both record one ticket.
//
// Why a few sharded ConfigMaps and not one object per ticket
// (docs/tickets.md): the approver needs only get and update on Shards named
// objects in its namespace, which the installer ships (the chart with
// tickets.enabled, deploy/components/join-tickets) and the approver never
// creates, where one object per ticket would need create, list and delete
// on every ConfigMap there (kube-system's included); expired entries are
// pruned on each write, so no collector runs; and the size is bounded: a
// shard whose encoded size would pass MaxShardBytes refuses to record
// (ErrFull), before the apiserver would refuse the write, and a ticket
// that cannot be recorded is not approved. An entry is of fixed size
// (the key's hash, an expiry, the spending CSR's UID): nothing a requester
// chooses (its CSR's name, its node's name) makes it longer.
package spent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
)

const (
	// Shards is how many ConfigMaps hold the spent tickets.
	Shards = 16
	// NamePrefix names the ConfigMaps: NamePrefix + a hex digit.
	NamePrefix = "mooring-spent-tickets-"
	// MaxShardBytes bounds a shard's encoded size: the ConfigMap in
	// protobuf, as the apiserver stores it in etcd, with its metadata and
	// the managedFields the apiserver keeps (a line per key), as last
	// read, with the new entry and its managedFields line in. The
	// apiserver refuses a ConfigMap whose values pass 1 MiB (422), and
	// etcd a request over 1.5 MiB (its default --max-request-bytes); the
	// 64 KiB kept below 1 MiB are for what else the apiserver may add on
	// the write (the writer's first managedFields entry, the storage
	// envelope) and for annotations an installer adds. A shard holds
	// about 7,800 unexpired tickets (an entry costs about 125 bytes
	// stored: 79 of data, 6 of encoding, 40 of managedFields), more on an
	// apiserver that keeps no managedFields (the test bed's: 85 bytes).
	MaxShardBytes = 1<<20 - 64<<10
	// keyHexLen is the length of an entry's key: the first 128 bits of
	// the SHA-256 of the ticket id, in hex.
	keyHexLen = 32
	// idLen is the length of an entry's spender: a CSR's UID, as the
	// apiserver makes them (a UUID in its 36-character form).
	idLen = 36
	// writeTimeout bounds one read or write of a shard.
	writeTimeout = 10 * time.Second
)

// ShardNames are the names of the ConfigMaps (for RBAC's resourceNames).
func ShardNames() []string {
	out := make([]string, Shards)
	for i := range out {
		out[i] = shardName(i)
	}
	return out
}

// shardName is the ConfigMap of shard i.
func shardName(i int) string { return NamePrefix + strconv.FormatInt(int64(i), 16) }

// Spender is who spends a ticket: a CSR. The record keeps its UID only
// (SpenderID): the name is the requester's to choose, the UID the
// apiserver's.
type Spender struct {
	Name string
	UID  types.UID
}

// SpenderID is what the record keeps of a CSR's UID: the UID itself when
// it is a UUID (every UID the apiserver makes), in its canonical form;
// else the first 36 hex digits of its SHA-256, so that an entry's size
// never depends on it.
func SpenderID(uid types.UID) types.UID {
	if u, err := uuid.Parse(string(uid)); err == nil {
		return types.UID(u.String())
	}
	sum := sha256.Sum256([]byte(uid))
	return types.UID(hex.EncodeToString(sum[:])[:idLen])
}

// ErrFull: the shard the ticket falls in would pass MaxShardBytes with
// it; the ticket is not recorded (and so not approved) until some of the
// shard's entries expire.
var ErrFull = errors.New("the spent-ticket record is full")

// ErrMissing: the shard the ticket falls in does not exist. The approver
// does not create it (it may not create ConfigMaps): the installer ships
// the shards. The ticket is not recorded, so not approved, until it
// exists.
var ErrMissing = errors.New("the spent-ticket record is missing")

// Store keeps spent tickets in ConfigMaps of one namespace.
type Store struct {
	client    typedcorev1.ConfigMapsGetter
	namespace string
	// Grace keeps an entry past the ticket's expiry (the clock skew the
	// approver allows on a ticket's exp).
	grace time.Duration
	now   func() time.Time

	shards [Shards]shard
}

// shard serialises this process's writes to one ConfigMap and keeps the
// last copy it read or wrote.
type shard struct {
	mu   sync.Mutex
	last *v1.ConfigMap // nil: not read yet, or must be read again
}

// New is a Store over the ConfigMaps of namespace. An entry is kept until
// its ticket's expiry plus grace.
func New(client typedcorev1.ConfigMapsGetter, namespace string, grace time.Duration) *Store {
	registerMetrics()
	return &Store{client: client, namespace: namespace, grace: grace, now: time.Now}
}

// entry is one spent ticket: until when it is kept, and the SpenderID of
// the CSR that spent it.
type entry struct {
	until time.Time
	by    types.UID
}

// The value of an entry: "UNTIL ID" (Unix seconds; the spender's ID, 36
// characters), 47 bytes until 2286. With its 32-byte key, an entry costs
// 79 bytes of data, whatever the CSR or its node are named.
func (e entry) String() string {
	return fmt.Sprintf("%d %s", e.until.Unix(), e.by)
}

// parseEntry reads "UNTIL ID", and "UNTIL UID NAME" as earlier versions
// wrote it (the name is not kept: the UID says who spent the ticket).
func parseEntry(s string) (entry, error) {
	f := strings.Fields(s)
	if len(f) != 2 && len(f) != 3 {
		return entry{}, fmt.Errorf("entry %q: want UNTIL ID", s)
	}
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("entry %q: %w", s, err)
	}
	by := types.UID(f[1])
	if len(f) == 3 {
		by = SpenderID(by)
	}
	return entry{until: time.Unix(sec, 0), by: by}, nil
}

// key is the entry key of a ticket's replay key, and the shard it is in.
func key(replayKey string) (string, int) {
	sum := sha256.Sum256([]byte(replayKey))
	h := hex.EncodeToString(sum[:])[:keyHexLen]
	n, _ := strconv.ParseInt(h[:1], 16, 64)
	return h, int(n)
}

// UnknownSpender is the holder of an entry that cannot be read.
const UnknownSpender types.UID = "(unreadable entry)"

// holder reads who spent k in cm: "" when nobody did (or the entry has
// expired). An entry it cannot read counts as spent by somebody unknown:
// the record is never read as "free" on doubt.
func holder(cm *v1.ConfigMap, k string, now time.Time) (types.UID, bool) {
	if cm == nil {
		return "", false
	}
	raw, ok := cm.Data[k]
	if !ok {
		return "", false
	}
	e, err := parseEntry(raw)
	if err != nil {
		return UnknownSpender, true
	}
	if now.After(e.until) {
		return "", false
	}
	return e.by, true
}

// Spent tells who spent the ticket of replayKey, if anybody but csr did:
// the SpenderID of that CSR. It reads the shard's newest copy this process
// has, or the apiserver's when it has none; Spend is what decides,
// atomically. An error means the answer is unknown.
func (s *Store) Spent(ctx context.Context, replayKey string, csr Spender) (types.UID, bool, error) {
	k, i := key(replayKey)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.last == nil {
		if err := s.read(ctx, sh, i); err != nil {
			return "", false, err
		}
	}
	by, ok := holder(sh.last, k, s.now())
	if ok && by == SpenderID(csr.UID) {
		return "", false, nil
	}
	return by, ok, nil
}

// Spend records the ticket of replayKey, valid until expiry, as spent by
// csr. It returns (the other CSR's SpenderID, true) when another CSR spent
// it first, ("", false) with a nil error once it is recorded for csr (now
// or by an earlier attempt of csr). Any error means it is not recorded:
// the ticket must not be approved (ErrFull, ErrMissing, or the
// apiserver's).
func (s *Store) Spend(ctx context.Context, replayKey string, expiry time.Time, csr Spender) (by types.UID, spent bool, err error) {
	k, i := key(replayKey)
	id := SpenderID(csr.UID)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer func() {
		result := "recorded"
		switch {
		case err != nil:
			result = "error"
		case spent:
			result = "spent"
		}
		spends.WithLabelValues(result).Inc()
	}()
	// A conflict means another writer (another approver, during a leader
	// change) wrote the shard since it was read: read it again and
	// decide anew, after a short random pause so two writers fall out of
	// step. Writers are one or two; if it still fails, the CSR is retried.
	for round := range conflictRounds {
		if round > 0 {
			if err := pause(ctx, round); err != nil {
				return "", false, err
			}
		}
		if sh.last == nil {
			if err := s.read(ctx, sh, i); err != nil {
				return "", false, err
			}
		}
		now := s.now()
		if by, ok := holder(sh.last, k, now); ok {
			if by == id {
				return "", false, nil
			}
			return by, true, nil
		}
		next := pruned(sh.last, now)
		next.Data[k] = entry{until: expiry.Add(s.grace), by: id}.String()
		if size := encodedSize(next) + managedFieldsLine; size > MaxShardBytes {
			return "", false, fmt.Errorf("%w: ConfigMap %s/%s would be %d bytes encoded with this ticket (limit %d), holding %d unexpired tickets; it takes new ones as they expire",
				ErrFull, s.namespace, next.Name, size, MaxShardBytes, len(next.Data)-1)
		}
		err := s.write(ctx, sh, next)
		switch {
		case err == nil:
			klog.FromContext(ctx).V(4).Info("Recorded the join ticket as spent", "configMap", next.Name, "csr", csr.Name, "uid", csr.UID)
			return "", false, nil
		case apierrors.IsConflict(err):
			klog.FromContext(ctx).V(2).Info("Spent-ticket record changed meanwhile; reading it again", "configMap", next.Name)
			sh.last = nil
		default:
			sh.last = nil
			if apierrors.IsNotFound(err) {
				err = s.missing(next.Name)
			}
			return "", false, fmt.Errorf("record the ticket as spent in ConfigMap %s/%s: %w", s.namespace, next.Name, err)
		}
	}
	return "", false, fmt.Errorf("record the ticket as spent: ConfigMap %s/%s kept changing", s.namespace, shardName(i))
}

// encodedSize is what the apiserver stores of cm: its protobuf encoding,
// metadata and managedFields included (less the few bytes of the storage
// envelope).
func encodedSize(cm *v1.ConfigMap) int { return cm.Size() }

// managedFieldsLine is what the apiserver adds to a shard's managedFields
// for a new key: `,"f:KEY":{}` in the writer's FieldsV1.
const managedFieldsLine = len(`,"f:":{}`) + keyHexLen

// missing is ErrMissing for the shard name, saying how to make it.
func (s *Store) missing(name string) error {
	return fmt.Errorf("%w: ConfigMap %s/%s does not exist, and the approver does not create ConfigMaps; "+
		"install the spent-ticket ConfigMaps %s0 to -f in %s as the chart (tickets.enabled) or deploy/components/join-tickets ships them "+
		"(docs/tickets.md#single-use). Until then the ticket joins that fall in it wait, none approved",
		ErrMissing, s.namespace, name, NamePrefix, s.namespace)
}

// conflictRounds bounds the writes of one Spend.
const conflictRounds = 10

// pause waits up to round*10 ms, at random.
func pause(ctx context.Context, round int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(round) * int64(10*time.Millisecond))))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read fetches shard i. A shard that does not exist is ErrMissing.
func (s *Store) read(ctx context.Context, sh *shard, i int) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	name := shardName(i)
	cm, err := s.client.ConfigMaps(s.namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return s.missing(name)
	case err != nil:
		return fmt.Errorf("read the spent tickets (ConfigMap %s/%s): %w", s.namespace, name, err)
	}
	sh.last = cm
	return nil
}

// pruned is a copy of cm without the entries kept past their time.
// Unreadable entries are kept. The metadata (the installer's labels and
// annotations) is kept as read.
func pruned(cm *v1.ConfigMap, now time.Time) *v1.ConfigMap {
	next := &v1.ConfigMap{
		TypeMeta:   cm.TypeMeta,
		ObjectMeta: *cm.ObjectMeta.DeepCopy(),
		Data:       make(map[string]string, len(cm.Data)+1),
		BinaryData: maps.Clone(cm.BinaryData),
		Immutable:  cm.Immutable,
	}
	for k, raw := range cm.Data {
		if e, err := parseEntry(raw); err == nil && now.After(e.until) {
			continue
		}
		next.Data[k] = raw
	}
	return next
}

// write updates the shard at the resourceVersion it was read.
func (s *Store) write(ctx context.Context, sh *shard, next *v1.ConfigMap) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	out, err := s.client.ConfigMaps(s.namespace).Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	sh.last = out
	entries.WithLabelValues(out.Name).Set(float64(len(out.Data)))
	shardBytes.WithLabelValues(out.Name).Set(float64(encodedSize(out)))
	return nil
}
