package spent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The apiserver's limits on a ConfigMap write: its validation refuses
// values that pass 1 MiB in all (ValidateConfigMap, 422), and etcd a
// request over 1.5 MiB (its default --max-request-bytes).
const (
	apiserverMaxValues = 1 << 20
	etcdMaxRequest     = 3 << 19
)

// casClient is a fake clientset whose ConfigMaps behave as the
// apiserver's: an update must carry the stored resourceVersion, a
// ConfigMap past the apiserver's or etcd's limits is refused, and the
// stored object has a managedFields line for each key of its data, as the
// apiserver records the writer's fields. (They live in a map of the
// reactors': the fake's own tracker runs structured-merge-diff on every
// write, which takes seconds on a shard of thousands of keys.)
func casClient(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset()
	var mu sync.Mutex
	rv := 0
	stored := map[string]*v1.ConfigMap{} // by namespace/name
	gr := v1.SchemeGroupVersion.WithResource("configmaps").GroupResource()
	c.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		g := a.(k8stesting.GetAction)
		cm, ok := stored[g.GetNamespace()+"/"+g.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, g.GetName())
		}
		return true, cm.DeepCopy(), nil
	})
	c.PrependReactor("delete", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		d := a.(k8stesting.DeleteAction)
		if _, ok := stored[d.GetNamespace()+"/"+d.GetName()]; !ok {
			return true, nil, apierrors.NewNotFound(gr, d.GetName())
		}
		delete(stored, d.GetNamespace()+"/"+d.GetName())
		return true, nil, nil
	})
	c.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.CreateAction).GetObject().(*v1.ConfigMap).DeepCopy()
		if _, ok := stored[cm.Namespace+"/"+cm.Name]; ok {
			return true, nil, apierrors.NewAlreadyExists(gr, cm.Name)
		}
		if err := asStored(cm); err != nil {
			return true, nil, err
		}
		rv++
		cm.ResourceVersion = strconv.Itoa(rv)
		stored[cm.Namespace+"/"+cm.Name] = cm
		return true, cm.DeepCopy(), nil
	})
	c.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.UpdateAction).GetObject().(*v1.ConfigMap).DeepCopy()
		cur, ok := stored[cm.Namespace+"/"+cm.Name]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, cm.Name)
		}
		if cur.ResourceVersion != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, cm.Name, errors.New("the object has been modified"))
		}
		if err := asStored(cm); err != nil {
			return true, nil, err
		}
		rv++
		cm.ResourceVersion = strconv.Itoa(rv)
		stored[cm.Namespace+"/"+cm.Name] = cm
		return true, cm.DeepCopy(), nil
	})
	c.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		list := &v1.ConfigMapList{}
		for _, cm := range stored {
			if cm.Namespace == a.GetNamespace() {
				list.Items = append(list.Items, *cm.DeepCopy())
			}
		}
		return true, list, nil
	})
	return c
}

// asStored checks cm against the apiserver's limits and adds the
// managedFields the apiserver keeps (one entry, a line per data key).
func asStored(cm *v1.ConfigMap) error {
	values := 0
	for _, v := range cm.Data {
		values += len(v)
	}
	for _, v := range cm.BinaryData {
		values += len(v)
	}
	if values > apiserverMaxValues {
		return apierrors.NewInvalid(v1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), cm.Name, field.ErrorList{
			field.TooLong(field.NewPath(""), "", apiserverMaxValues)})
	}
	var fields strings.Builder
	fields.WriteString(`{"f:data":{".":{}`)
	for k := range cm.Data {
		fields.WriteString(`,"f:` + k + `":{}`)
	}
	fields.WriteString(`}}`)
	cm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "mooring-csr-approver", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: &metav1.Time{Time: time.Unix(1767225600, 0)}, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(fields.String())}}
	if n := cm.Size(); n > etcdMaxRequest {
		return apierrors.NewInternalError(fmt.Errorf("etcdserver: request is too large (%d bytes)", n))
	}
	return nil
}

// createShards makes the shards as the installer ships them: empty,
// with the chart's labels and annotation.
func createShards(t *testing.T, c *fake.Clientset) {
	t.Helper()
	for _, name := range ShardNames() {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system",
			Labels:      map[string]string{"app.kubernetes.io/part-of": "mooring", "app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"helm.sh/resource-policy": "keep"}}}
		if _, err := c.CoreV1().ConfigMaps("kube-system").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// shardClient is casClient with the shards made.
func shardClient(t *testing.T) *fake.Clientset {
	t.Helper()
	c := casClient(t)
	createShards(t, c)
	return c
}

func csr(name string) Spender { return Spender{Name: name, UID: types.UID("uid-" + name)} }

// inShard are n replay keys whose tickets fall in shard i.
func inShard(i, n int, prefix string) []string {
	var out []string
	for j := 0; len(out) < n; j++ {
		k := fmt.Sprintf("%s/%d", prefix, j)
		if _, sh := key(k); sh == i {
			out = append(out, k)
		}
	}
	return out
}

func TestSpendOnceThenSpent(t *testing.T) {
	ctx := context.Background()
	s := New(shardClient(t).CoreV1(), "kube-system", time.Minute)
	exp := time.Now().Add(time.Hour)
	if by, spent, err := s.Spend(ctx, "ticket/a", exp, csr("first")); err != nil || spent {
		t.Fatalf("first spend: %v %v %v", by, spent, err)
	}
	// The same CSR again (its approval write failed and it is retried).
	if by, spent, err := s.Spend(ctx, "ticket/a", exp, csr("first")); err != nil || spent {
		t.Fatalf("the spender again: %v %v %v", by, spent, err)
	}
	first := SpenderID(csr("first").UID)
	by, spent, err := s.Spend(ctx, "ticket/a", exp, csr("second"))
	if err != nil || !spent || by != first {
		t.Fatalf("second spend: %v %v %v, want %s", by, spent, err, first)
	}
	if by, spent, err := s.Spent(ctx, "ticket/a", csr("third")); err != nil || !spent || by != first {
		t.Fatalf("Spent: %v %v %v", by, spent, err)
	}
	if _, spent, _ := s.Spent(ctx, "ticket/a", csr("first")); spent {
		t.Fatal("Spent counts the spender's own record")
	}
	if _, spent, err := s.Spent(ctx, "ticket/b", csr("first")); err != nil || spent {
		t.Fatalf("another ticket: %v %v", spent, err)
	}
}

func TestSpenderID(t *testing.T) {
	uid := types.UID("F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6")
	if got := SpenderID(uid); got != "f81d4fae-7dec-11d0-a765-00a0c91e6bf6" {
		t.Errorf("SpenderID(%s) = %s, want the UUID as the apiserver writes it", uid, got)
	}
	for _, uid := range []types.UID{"", "uid-x", types.UID(strings.Repeat("u", 300)), "a b"} {
		got := SpenderID(uid)
		if len(got) != idLen || strings.ContainsAny(string(got), " \t") || got == SpenderID(uid+"!") {
			t.Errorf("SpenderID(%q) = %q: want %d characters, no space, distinct", uid, got, idLen)
		}
	}
}

// TestTwoApproversCannotBothSpend: two stores on one apiserver (a leader
// change's overlap) race to spend the same tickets; each ticket is spent
// by exactly one CSR.
func TestTwoApproversCannotBothSpend(t *testing.T) {
	ctx := context.Background()
	c := shardClient(t)
	a, b := New(c.CoreV1(), "kube-system", time.Minute), New(c.CoreV1(), "kube-system", time.Minute)
	exp := time.Now().Add(time.Hour)
	const tickets = 200
	won := make([]int, tickets)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range tickets {
		for j, s := range []*Store{a, b} {
			wg.Go(func() {
				_, spent, err := s.Spend(ctx, fmt.Sprintf("ticket/%d", i), exp, csr(fmt.Sprintf("csr-%d-%d", i, j)))
				if err != nil {
					t.Error(err)
					return
				}
				if !spent {
					mu.Lock()
					won[i]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for i, n := range won {
		if n != 1 {
			t.Errorf("ticket %d spent by %d CSRs", i, n)
		}
	}
	// Nothing was lost on a conflict: a fresh store sees every ticket.
	fresh := New(c.CoreV1(), "kube-system", time.Minute)
	for i := range tickets {
		if _, spent, err := fresh.Spent(ctx, fmt.Sprintf("ticket/%d", i), csr("late")); err != nil || !spent {
			t.Fatalf("ticket %d: spent %v, %v", i, spent, err)
		}
	}
}

func TestExpiredEntriesArePruned(t *testing.T) {
	ctx := context.Background()
	c := shardClient(t)
	s := New(c.CoreV1(), "kube-system", time.Minute)
	now := time.Now()
	s.now = func() time.Time { return now }
	if _, _, err := s.Spend(ctx, "ticket/old", now.Add(time.Hour), csr("old")); err != nil {
		t.Fatal(err)
	}
	// Past its expiry and the grace, the ticket's entry goes with the
	// next write to its shard.
	now = now.Add(time.Hour + 2*time.Minute)
	if _, spent, _ := s.Spent(ctx, "ticket/old", csr("x")); spent {
		t.Fatal("an expired ticket still counts as spent")
	}
	_, shard := key("ticket/old")
	other := inShard(shard, 1, "ticket/n")[0]
	if _, _, err := s.Spend(ctx, other, now.Add(time.Hour), csr("new")); err != nil {
		t.Fatal(err)
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(shard), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("shard holds %d entries, want the new one only: %v", len(cm.Data), cm.Data)
	}
	// The installer's metadata is kept as it was shipped.
	if cm.Labels["app.kubernetes.io/managed-by"] != "Helm" || cm.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the shard's metadata changed: labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
}

// TestUnreadableEntryFailsClosed: an entry that cannot be read counts as
// spent.
func TestUnreadableEntryFailsClosed(t *testing.T) {
	ctx := context.Background()
	c := shardClient(t)
	k, shard := key("ticket/x")
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(shard), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{k: "garbage"}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := New(c.CoreV1(), "kube-system", time.Minute)
	if by, spent, err := s.Spend(ctx, "ticket/x", time.Now().Add(time.Hour), csr("a")); err != nil || !spent || by != UnknownSpender {
		t.Fatalf("an unreadable entry: %v, spent %v, %v", by, spent, err)
	}
}

// TestEntriesOfEarlierVersionsStaySpent: entries as earlier versions wrote
// them ("UNTIL UID NAME") keep their tickets spent, by that UID.
func TestEntriesOfEarlierVersionsStaySpent(t *testing.T) {
	ctx := context.Background()
	c := shardClient(t)
	k, shard := key("ticket/old-format")
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(shard), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	until := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	uid := types.UID("5a1f6c3e-0d6b-4c8e-9a37-2f4e1b7c9d01")
	cm.Data = map[string]string{k: until + " " + string(uid) + " node-csr-earlier"}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := New(c.CoreV1(), "kube-system", time.Minute)
	if by, spent, err := s.Spend(ctx, "ticket/old-format", time.Now().Add(time.Hour), csr("thief")); err != nil || !spent || by != uid {
		t.Fatalf("a ticket spent before the upgrade: %v, spent %v, %v", by, spent, err)
	}
	if _, spent, err := s.Spend(ctx, "ticket/old-format", time.Now().Add(time.Hour), Spender{Name: "node-csr-earlier", UID: uid}); err != nil || spent {
		t.Fatalf("its own spender, retried: spent %v, %v", spent, err)
	}
}

// TestMissingShardIsAnErrorNotACreate: the approver may not create
// ConfigMaps. A shard that does not exist fails Spent and Spend with
// ErrMissing, which names the ConfigMap and says how to make it, and
// nothing is created; once the installer made it, tickets are recorded.
func TestMissingShardIsAnErrorNotACreate(t *testing.T) {
	ctx := context.Background()
	c := casClient(t)
	var creates atomic.Int32
	c.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates.Add(1)
		return false, nil, nil
	})
	s := New(c.CoreV1(), "kube-system", time.Minute)
	_, shard := key("ticket/m")
	exp := time.Now().Add(time.Hour)
	if _, _, err := s.Spent(ctx, "ticket/m", csr("a")); !errors.Is(err, ErrMissing) {
		t.Fatalf("Spent without the shard: %v, want ErrMissing", err)
	}
	_, spent, err := s.Spend(ctx, "ticket/m", exp, csr("a"))
	if !errors.Is(err, ErrMissing) || spent {
		t.Fatalf("Spend without the shard: spent %v, %v, want ErrMissing", spent, err)
	}
	for _, want := range []string{"kube-system/" + shardName(shard), "tickets.enabled", "deploy/components/join-tickets"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if n := creates.Load(); n != 0 {
		t.Fatalf("the store asked to create %d ConfigMaps", n)
	}
	createShards(t, c)
	if _, spent, err := s.Spend(ctx, "ticket/m", exp, csr("a")); err != nil || spent {
		t.Fatalf("once the shard exists: spent %v, %v", spent, err)
	}
	// Deleted while this process holds a copy: ErrMissing again, not a
	// write that brings it back.
	if err := c.CoreV1().ConfigMaps("kube-system").Delete(ctx, shardName(shard), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other := inShard(shard, 1, "ticket/after-delete")[0]
	if _, _, err := s.Spend(ctx, other, exp, csr("b")); !errors.Is(err, ErrMissing) {
		t.Fatalf("a deleted shard: %v, want ErrMissing", err)
	}
}

// longName is a CSR name of the most characters the apiserver takes (a
// DNS subdomain, 253), which the requester chooses.
func longName(i int) string {
	p := fmt.Sprintf("node-csr-%06d-", i)
	return p + strings.Repeat("x", 253-len(p))
}

// TestLongNamesCannotOverflowAShard: a requester names its CSRs, and
// before this test the record kept each spending CSR's name in its entry.
// Joins whose CSRs had names of 253 characters made entries of 333 bytes,
// and a shard passed the 1 MiB the apiserver allows a ConfigMap's values
// at about 3,480 tickets, short of the 6,000 the count bound let in: the
// apiserver refused the write (422) and every ticket join of that shard
// stalled on an error that said nothing of a full record. Now an entry
// does not grow with the name, and a full shard refuses with ErrFull
// before the apiserver would refuse it.
func TestLongNamesCannotOverflowAShard(t *testing.T) {
	ctx := context.Background()
	c := casClient(t)
	createShards(t, c)
	s := New(c.CoreV1(), "kube-system", time.Minute)
	exp := time.Now().Add(time.Hour)
	const shard = 3
	keys := inShard(shard, 3600, "ticket/long")
	for i, k := range keys {
		_, spent, err := s.Spend(ctx, k, exp, Spender{Name: longName(i), UID: types.UID(uuid.NewString())})
		if err != nil {
			t.Fatalf("ticket %d of one shard, spent by a CSR named with 253 characters: %v", i+1, err)
		}
		if spent {
			t.Fatalf("ticket %d: spent by another", i+1)
		}
	}
	// Fill the shard to a few tickets short of its bound with more entries
	// like the store's own, then spend until it refuses: with ErrFull, the
	// apiserver never refusing a write.
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(shard), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var value string
	for _, v := range cm.Data {
		value = v
		break
	}
	perEntry := (cm.Size() - emptySize(t, c)) / len(cm.Data)
	for i := 0; cm.Size()+perEntry*20 < MaxShardBytes; i++ {
		cm.Data[fmt.Sprintf("%032x", i)] = value
		// The managedFields as stored, every 256 entries and for each of
		// the last few hundred.
		if i%256 == 0 || cm.Size()+perEntry*300 > MaxShardBytes {
			if err := asStored(cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cm, err = c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cm.Size() > MaxShardBytes {
		t.Fatalf("filled to %d bytes, past the bound", cm.Size())
	}
	more := inShard(shard, 100, "ticket/more")
	for i, k := range more {
		_, _, err := s.Spend(ctx, k, exp, Spender{Name: longName(i), UID: types.UID(uuid.NewString())})
		if errors.Is(err, ErrFull) {
			cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(shard), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("shard full at %d tickets, %d bytes encoded (%d per entry)", len(cm.Data), cm.Size(), perEntry)
			if cm.Size() > MaxShardBytes || cm.Size()+perEntry <= MaxShardBytes {
				t.Errorf("the shard is %d bytes encoded, want at most MaxShardBytes %d, and full", cm.Size(), MaxShardBytes)
			}
			return
		}
		if err != nil {
			t.Fatalf("spend %d past the fill: %v, want nil or ErrFull", i, err)
		}
	}
	t.Fatalf("%d more tickets went in past the fill", len(more))
}

// emptySize is the encoded size of a shard without entries.
func emptySize(t *testing.T, c *fake.Clientset) int {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(context.Background(), shardName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm = cm.DeepCopy()
	cm.Data = nil
	if err := asStored(cm); err != nil {
		t.Fatal(err)
	}
	return cm.Size()
}

// TestEntriesAreOfFixedSize: the same tickets spent by CSRs of 253-character
// names and of short ones make shards of one size: an entry is 79 bytes of
// data, whatever the requester named its CSR (and its node).
func TestEntriesAreOfFixedSize(t *testing.T) {
	ctx := context.Background()
	exp := time.Unix(1767225600, 0)
	sizes := map[bool]int{}
	for _, long := range []bool{false, true} {
		c := shardClient(t)
		s := New(c.CoreV1(), "kube-system", time.Minute)
		s.now = func() time.Time { return exp.Add(-time.Hour) }
		keys := inShard(0, 100, "ticket/fixed")
		for i, k := range keys {
			name := fmt.Sprintf("c%d", i)
			if long {
				name = longName(i)
			}
			if _, _, err := s.Spend(ctx, k, exp, Spender{Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))}); err != nil {
				t.Fatal(err)
			}
		}
		cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, shardName(0), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sizes[long] = cm.Size()
		for k, v := range cm.Data {
			if len(k)+len(v) != 79 {
				t.Errorf("entry %s: %q, %d bytes, want 79", k, v, len(k)+len(v))
			}
		}
	}
	if sizes[true] != sizes[false] {
		t.Errorf("100 tickets spent by CSRs of 253-character names make a shard of %d bytes, by short names %d", sizes[true], sizes[false])
	}
}

func TestShardNames(t *testing.T) {
	names := ShardNames()
	if len(names) != Shards || names[0] != "mooring-spent-tickets-0" || names[15] != "mooring-spent-tickets-f" {
		t.Fatalf("%v", names)
	}
	for i := range 1000 {
		if _, sh := key(fmt.Sprintf("t%d", i)); sh < 0 || sh >= Shards {
			t.Fatalf("shard %d", sh)
		}
	}
}
