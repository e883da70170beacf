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

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// casClient is a fake clientset whose ConfigMap updates must carry the
// stored resourceVersion, as the apiserver's do (the fake alone takes any).
func casClient(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset()
	var mu sync.Mutex
	rv := 0
	gvr := v1.SchemeGroupVersion.WithResource("configmaps")
	c.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.CreateAction).GetObject().(*v1.ConfigMap).DeepCopy()
		rv++
		cm.ResourceVersion = strconv.Itoa(rv)
		if err := c.Tracker().Create(gvr, cm, cm.Namespace); err != nil {
			return true, nil, err
		}
		return true, cm, nil
	})
	c.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(k8stesting.UpdateAction).GetObject().(*v1.ConfigMap).DeepCopy()
		cur, err := c.Tracker().Get(gvr, cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*v1.ConfigMap).ResourceVersion != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name, errors.New("the object has been modified"))
		}
		rv++
		cm.ResourceVersion = strconv.Itoa(rv)
		if err := c.Tracker().Update(gvr, cm, cm.Namespace); err != nil {
			return true, nil, err
		}
		return true, cm, nil
	})
	return c
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
	by, spent, err := s.Spend(ctx, "ticket/a", exp, csr("second"))
	if err != nil || !spent || by.Name != "first" {
		t.Fatalf("second spend: %v %v %v", by, spent, err)
	}
	if by, spent, err := s.Spent(ctx, "ticket/a", csr("third")); err != nil || !spent || by.Name != "first" {
		t.Fatalf("Spent: %v %v %v", by, spent, err)
	}
	if _, spent, _ := s.Spent(ctx, "ticket/a", csr("first")); spent {
		t.Fatal("Spent counts the spender's own record")
	}
	if _, spent, err := s.Spent(ctx, "ticket/b", csr("first")); err != nil || spent {
		t.Fatalf("another ticket: %v %v", spent, err)
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
	var other string
	for i := 0; ; i++ {
		if _, sh := key(fmt.Sprintf("ticket/n%d", i)); sh == shard {
			other = fmt.Sprintf("ticket/n%d", i)
			break
		}
	}
	if _, _, err := s.Spend(ctx, other, now.Add(time.Hour), csr("new")); err != nil {
		t.Fatal(err)
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, NamePrefix+strconv.FormatInt(int64(shard), 16), metav1.GetOptions{})
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

// TestFullOrUnreadableFailsClosed: a full shard refuses to record (the
// ticket is then not approved), and an entry that cannot be read counts
// as spent.
func TestFullOrUnreadableFailsClosed(t *testing.T) {
	ctx := context.Background()
	c := casClient(t)
	k, shard := key("ticket/x")
	name := NamePrefix + strconv.FormatInt(int64(shard), 16)
	data := map[string]string{k: "garbage"}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := New(c.CoreV1(), "kube-system", time.Minute)
	if _, spent, err := s.Spend(ctx, "ticket/x", time.Now().Add(time.Hour), csr("a")); err != nil || !spent {
		t.Fatalf("an unreadable entry: spent %v, %v", spent, err)
	}
	until := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	for i := range MaxPerShard {
		data[fmt.Sprintf("%032x", i)] = until + " uid csr"
	}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", ResourceVersion: "1"}, Data: data}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var other string
	for i := 0; ; i++ {
		if _, sh := key(fmt.Sprintf("ticket/y%d", i)); sh == shard {
			other = fmt.Sprintf("ticket/y%d", i)
			break
		}
	}
	if _, _, err := New(c.CoreV1(), "kube-system", time.Minute).Spend(ctx, other, time.Now().Add(time.Hour), csr("b")); !errors.Is(err, ErrFull) {
		t.Fatalf("a full shard: %v, want ErrFull", err)
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
