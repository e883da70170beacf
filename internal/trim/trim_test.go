package trim

import (
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestObject(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}, ManagedFields: managed},
		Spec:       corev1.NodeSpec{ProviderID: "local://i-1"},
		Status: corev1.NodeStatus{
			Images:     []corev1.ContainerImage{{Names: []string{"pause"}, SizeBytes: 1}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	got, err := Object(node)
	if err != nil || got != node {
		t.Fatalf("%v, %v", got, err)
	}
	if node.ManagedFields != nil || node.Status.Images != nil {
		t.Errorf("not trimmed: %+v", node)
	}
	if node.Labels["a"] != "b" || node.Spec.ProviderID == "" || len(node.Status.Addresses) != 1 || len(node.Status.Conditions) != 1 {
		t.Errorf("trimmed what controllers read: %+v", node)
	}

	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: managed},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: []byte("PEM"), SignerName: "s"},
	}
	if _, err := Object(csr); err != nil || csr.ManagedFields != nil || string(csr.Spec.Request) != "PEM" {
		t.Errorf("CSR: %+v, %v", csr, err)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "n", Obj: node}
	if got, err := Object(tomb); err != nil || got != tomb {
		t.Errorf("tombstone: %v, %v", got, err)
	}
}
