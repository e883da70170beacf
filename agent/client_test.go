package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// fakeClient is the agent's Client over client-go's fake clientset, whose
// typed clients fit CSRClient and ConfigMapClient. It keeps the fake's
// IsWatchListSemanticsUnSupported, as the clientset passed to client-go's
// CSR helpers did.
type fakeClient struct{ *fake.Clientset }

func (c fakeClient) CertificateSigningRequests() CSRClient {
	return c.CertificatesV1().CertificateSigningRequests()
}

func (c fakeClient) ConfigMaps(namespace string) ConfigMapClient {
	return c.CoreV1().ConfigMaps(namespace)
}

// TestClientRequests: the client the agent makes sends what client-go's
// typed clients send: the paths of certificates.k8s.io/v1 and core/v1,
// protobuf preferred, the user agent, the bearer token; and it reads JSON
// answers, Status errors included.
func TestClientRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" accept="+r.Header.Get("Accept")+" ua="+r.UserAgent()+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/apis/certificates.k8s.io/v1/certificatesigningrequests/mine":
			_, _ = w.Write([]byte(`{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"mine","uid":"u-1"},"spec":{"signerName":"s","request":""}}`))
		case r.URL.Path == "/api/v1/namespaces/kube-system/configmaps/kubelet-config":
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kubelet-config","namespace":"kube-system"},"data":{"kubelet":"k: v"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404,"message":"not here"}`))
		}
	}))
	defer srv.Close()
	c, err := NewClientForConfig(&rest.Config{Host: srv.URL, BearerToken: "abcdef.0123456789abcdef", UserAgent: "mooring-agent"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	csr, err := c.CertificateSigningRequests().Get(ctx, "mine", metav1.GetOptions{})
	if err != nil || csr.Name != "mine" || csr.UID != "u-1" || csr.Spec.SignerName != "s" {
		t.Fatalf("Get = %+v, %v", csr, err)
	}
	cm, err := c.ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil || cm.Data["kubelet"] != "k: v" {
		t.Fatalf("ConfigMap = %+v, %v", cm, err)
	}
	if _, err := c.CertificateSigningRequests().Get(ctx, "other", metav1.GetOptions{}); !errors.IsNotFound(err) || !strings.Contains(err.Error(), "not here") {
		t.Fatalf("a 404 Status: %v", err)
	}
	if _, err := c.CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=mine", ResourceVersion: "7"}); !errors.IsNotFound(err) {
		t.Fatalf("List: %v", err)
	}
	want := []string{
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests/mine",
		"GET /api/v1/namespaces/kube-system/configmaps/kubelet-config",
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests/other",
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=metadata.name%3Dmine&resourceVersion=7",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests %q", got)
	}
	for i, g := range got {
		if !strings.HasPrefix(g, want[i]+" ") {
			t.Errorf("request %d: %s, want %s", i, g, want[i])
		}
		if !strings.Contains(g, "accept=application/vnd.kubernetes.protobuf,application/json ") || !strings.Contains(g, "ua=mooring-agent ") ||
			!strings.HasSuffix(g, "auth=Bearer abcdef.0123456789abcdef") {
			t.Errorf("request %d: %s", i, g)
		}
	}
}
