package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the part of the Kubernetes API the agent uses: certificate
// signing requests, and the ConfigMap of the cluster's kubelet settings.
// NewClientForConfig makes one; a clientset fits it through its typed
// clients (see the tests).
type Client interface {
	CertificateSigningRequests() CSRClient
	ConfigMaps(namespace string) ConfigMapClient
}

// CSRClient is what the agent does with CSRs (certificates.k8s.io/v1), as
// client-go's typed client does it.
type CSRClient interface {
	Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error)
	List(ctx context.Context, opts metav1.ListOptions) (*certificatesv1.CertificateSigningRequestList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ConfigMapClient reads ConfigMaps of one namespace.
type ConfigMapClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
}

// The agent's scheme knows only the kinds it reads and writes, and the
// meta kinds of their API groups (options, watch events, Status): the
// clientset's scheme registers every API group, and linking it made most of
// the agent's binary.
var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	scheme.AddKnownTypes(certificatesv1.SchemeGroupVersion,
		&certificatesv1.CertificateSigningRequest{}, &certificatesv1.CertificateSigningRequestList{})
	metav1.AddToGroupVersion(scheme, certificatesv1.SchemeGroupVersion)
	scheme.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.ConfigMap{}, &corev1.ConfigMapList{})
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	// As the clientset's scheme: the unversioned meta kinds.
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
}

// restClient is a typed client's view of the API: the generated clients'
// defaults (the group's path, the scheme's codecs without conversion, the
// default user agent) over a shared HTTP client.
func restClient(cfg rest.Config, gv schema.GroupVersion, apiPath string, h *http.Client) (*rest.RESTClient, error) {
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(&cfg, h)
}

// NewClientForConfig makes the agent's client as client-go's clientset
// would make its CertificatesV1 and CoreV1 clients from cfg: one HTTP
// client (one transport) for both, and one rate limiter when cfg sets a
// QPS; the same requests, protobuf preferred.
func NewClientForConfig(cfg *rest.Config) (Client, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	h, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, err
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	certs, err := restClient(c, certificatesv1.SchemeGroupVersion, "/apis", h)
	if err != nil {
		return nil, err
	}
	core, err := restClient(c, corev1.SchemeGroupVersion, "/api", h)
	if err != nil {
		return nil, err
	}
	return &restClients{certs: certs, core: core}, nil
}

type restClients struct {
	certs, core rest.Interface
}

func (c *restClients) CertificateSigningRequests() CSRClient {
	return &resource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList]{
		client: c.certs, name: "certificatesigningrequests",
		newObject: func() *certificatesv1.CertificateSigningRequest { return &certificatesv1.CertificateSigningRequest{} },
		newList: func() *certificatesv1.CertificateSigningRequestList {
			return &certificatesv1.CertificateSigningRequestList{}
		},
	}
}

func (c *restClients) ConfigMaps(namespace string) ConfigMapClient {
	return &resource[*corev1.ConfigMap, *corev1.ConfigMapList]{
		client: c.core, name: "configmaps", namespace: namespace,
		newObject: func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		newList:   func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} },
	}
}

// resource is one kind of an API group's objects, asked for as client-go's
// generated clients ask (k8s.io/client-go/gentype, with protobuf preferred:
// PrefersProtobuf), of the namespace if one is set. gentype itself is not
// used: it links client-go's fake clients, and with them the managed fields
// machinery and OpenAPI models.
type resource[T, L runtime.Object] struct {
	client    rest.Interface
	name      string
	namespace string
	newObject func() T
	newList   func() L
}

func (r *resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	err := r.client.Get().
		UseProtobufAsDefaultIfPreferred(true).
		NamespaceIfScoped(r.namespace, r.namespace != "").
		Resource(r.name).
		Name(name).
		VersionedParams(&opts, parameterCodec).
		Do(ctx).
		Into(out)
	return out, err
}

func (r *resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.client.Get().
		UseProtobufAsDefaultIfPreferred(true).
		NamespaceIfScoped(r.namespace, r.namespace != "").
		Resource(r.name).
		VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(out)
	return out, err
}

func (r *resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.client.Get().
		UseProtobufAsDefaultIfPreferred(true).
		NamespaceIfScoped(r.namespace, r.namespace != "").
		Resource(r.name).
		VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

func (r *resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	err := r.client.Post().
		UseProtobufAsDefaultIfPreferred(true).
		NamespaceIfScoped(r.namespace, r.namespace != "").
		Resource(r.name).
		VersionedParams(&opts, parameterCodec).
		Body(obj).
		Do(ctx).
		Into(out)
	return out, err
}

// timeoutOf is a list or watch's timeoutSeconds as a request timeout (0:
// none).
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
