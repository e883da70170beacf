package aws

// Joins judged by the approver's own decision code (csrapprover.Decider)
// over this backend as mooring's binaries wire it: the Cloud's evidence
// verifier and its shared view of the stand-in's EC2, with evidence made by
// the node agent on the instance.

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// joinRole is the node role of the join tests' config (env.config).
const joinRole = "node"

// joinWorld is a Cloud over the stand-in and a Decider over the Cloud.
type joinWorld struct {
	t     *testing.T
	env   *env
	cloud *Cloud
	nodes mapNodes
}

func newJoinWorld(t *testing.T, edit func(*Config, *awstest.Cloud)) *joinWorld {
	t.Helper()
	return newJoinWorldOn(t, newEnv(t), edit)
}

// newJoinWorldOn is newJoinWorld over a given stand-in.
func newJoinWorldOn(t *testing.T, e *env, edit func(*Config, *awstest.Cloud)) *joinWorld {
	t.Helper()
	cfg := e.config()
	edit(&cfg, e.aws)
	c, err := NewWithClients(cfg, e.ec2, awstest.HTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	return &joinWorld{t: t, env: e, cloud: c, nodes: mapNodes{}}
}

// node puts a running instance of the cluster whose profile holds role.
func (w *joinWorld) node(ip, profile, role string) awstest.Instance {
	w.t.Helper()
	return w.env.put(w.t, awstest.Instance{PrivateIP: ip, Role: role, InstanceProfile: profile, Tags: map[string]string{clusterTag: "owned"}})
}

// decider judges with an instance record no older than the decision.
func (w *joinWorld) decider() *csrapprover.Decider {
	return csrapprover.NewDecider(csrapprover.Config{Cluster: w.cloud.ClusterTag()}, w.cloud.EvidenceVerifiers(), w.cloud.InstanceView(), w.nodes, noReplays{})
}

// joinCSR is a bootstrap token holder's client CSR for the instance's node
// name, with evidence the agent on the instance makes now.
func (w *joinWorld) joinCSR(in awstest.Instance) *certificatesv1.CertificateSigningRequest {
	w.t.Helper()
	key, binding := nodeidtest.BoundKey(w.t)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + in.PrivateDNSName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		w.t.Fatal(err)
	}
	req, err := evidence.Encode(der, w.evidence(in, binding))
	if err != nil {
		w.t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "join-" + in.ID},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Username: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", "system:authenticated"},
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// evidence is what the agent on the instance signs for binding now.
func (w *joinWorld) evidence(in awstest.Instance, binding string) evidence.Block {
	w.t.Helper()
	md, err := w.env.aws.IMDS(in.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	agent, err := agentid.NewNodeIdentity(nodeid.Config{MetadataURL: md, Settings: map[string]string{agentid.SettingSTSEndpoint: w.env.aws.Endpoint()}})
	if err != nil {
		w.t.Fatal(err)
	}
	block, err := agent.Evidence(context.Background(), binding)
	if err != nil {
		w.t.Fatal(err)
	}
	return block
}

// decide judges csr and checks the reason.
func (w *joinWorld) decide(what string, csr *certificatesv1.CertificateSigningRequest, want string) {
	w.t.Helper()
	d, err := w.decider().Decide(context.Background(), csr)
	if err != nil {
		w.t.Fatalf("%s: no decision: %v", what, err)
	}
	if d.Reason != want || d.Approve != (want == csrapprover.ReasonApproved) {
		w.t.Errorf("%s: %s (%s), want %s", what, d.Reason, d.Message, want)
	}
}

// mapNodes are the cluster's Nodes, by name.
type mapNodes map[string]*v1.Node

func (m mapNodes) Get(name string) (*v1.Node, error) {
	if n, ok := m[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}

// WithAddress lists the Nodes carrying address.
func (m mapNodes) WithAddress(address string) ([]*v1.Node, error) {
	var out []*v1.Node
	for _, n := range m {
		for _, a := range n.Status.Addresses {
			if view.AddressKey(a.Address) == view.AddressKey(address) {
				out = append(out, n)
				break
			}
		}
	}
	return out, nil
}

// noReplays: no evidence was presented before.
type noReplays struct{}

func (noReplays) EarlierHolder(context.Context, string, *certificatesv1.CertificateSigningRequest) (string, error) {
	return "", nil
}

func (noReplays) SpentBy(context.Context, string, *certificatesv1.CertificateSigningRequest) (string, error) {
	return "", nil
}

func (noReplays) Spend(context.Context, string, time.Time, *certificatesv1.CertificateSigningRequest) (string, error) {
	return "", nil
}

// Attack (issue 28, item 4): credentials issued under the node role before
// the instance's profile was swapped to another role's are still valid for
// hours, and sign evidence STS vouches for as a node role session. The join
// is denied: the instance's current profile is not a node role's. An
// instance without any profile is denied the same way.
func TestJoinAfterProfileSwapDenied(t *testing.T) {
	w := newJoinWorld(t, func(*Config, *awstest.Cloud) {})
	in := w.node("127.0.0.21", "", joinRole)
	w.decide("control: the instance with the node profile", w.joinCSR(in), csrapprover.ReasonApproved)

	made := w.joinCSR(in) // signed with the node role's credentials
	if err := w.env.aws.SetInstanceProfile(in.ID, "admin", "admin"); err != nil {
		t.Fatal(err)
	}
	w.decide("evidence of the node role, profile since swapped to another role's", made, csrapprover.ReasonInstanceIdentity)

	bare := w.node("127.0.0.22", "", joinRole)
	made = w.joinCSR(bare)
	if err := w.env.aws.SetInstanceProfile(bare.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	w.decide("evidence of the node role, profile since removed", made, csrapprover.ReasonInstanceIdentity)
}

// A profile named apart from its role is not a node profile by default;
// nodeInstanceProfiles names it.
func TestJoinWithProfileNamedApartFromItsRole(t *testing.T) {
	w := newJoinWorld(t, func(*Config, *awstest.Cloud) {})
	in := w.node("127.0.0.23", "node-profile", joinRole)
	w.decide("default: the node roles' names", w.joinCSR(in), csrapprover.ReasonInstanceIdentity)

	w = newJoinWorld(t, func(c *Config, _ *awstest.Cloud) { c.NodeInstanceProfiles = []string{"other", "node-profile"} })
	in = w.node("127.0.0.24", "node-profile", joinRole)
	w.decide("nodeInstanceProfiles names it", w.joinCSR(in), csrapprover.ReasonApproved)
	// A node profile holding a role that is not a node role is no help:
	// the evidence's role is checked first.
	in = w.node("127.0.0.25", "node-profile", "admin")
	w.decide("a node profile of another role", w.joinCSR(in), csrapprover.ReasonEvidenceIssuer)
}

// Renewals and serving certificates do not look at the instance profile
// (docs/aws.md): a node whose profile was swapped keeps renewing while its
// instance runs in the cluster; a fresh join is what the profile guards.
func TestRenewalAfterProfileSwap(t *testing.T) {
	w := newJoinWorld(t, func(*Config, *awstest.Cloud) {})
	in := w.node("127.0.0.26", "", joinRole)
	w.nodes[in.PrivateDNSName] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.PrivateDNSName},
		Spec: v1.NodeSpec{ProviderID: agentid.ProviderID(in.Zone, in.ID)}}
	if err := w.env.aws.SetInstanceProfile(in.ID, "admin", "admin"); err != nil {
		t.Fatal(err)
	}
	csr := w.joinCSR(in)
	csr.Spec.Username, csr.Spec.Groups = "system:node:"+in.PrivateDNSName, []string{"system:nodes", "system:authenticated"}
	w.decide("renewal", csr, csrapprover.ReasonApproved)
}

// Attack (issue 28, item 5): a node role deleted and created again under
// its name (its trust policy, and who may assume it, are new) is a new
// role with a new unique id. With the role's id in nodeRoleIDs its
// sessions are denied; without it they join: a documented limit.
func TestJoinAsRecreatedRole(t *testing.T) {
	pinned := newJoinWorld(t, func(c *Config, a *awstest.Cloud) { c.NodeRoleIDs = map[string]string{joinRole: a.RoleID(joinRole)} })
	in := pinned.node("127.0.0.31", "", joinRole)
	pinned.decide("control: the configured role", pinned.joinCSR(in), csrapprover.ReasonApproved)
	pinned.env.aws.RecreateRole(joinRole)
	pinned.decide("a session of the role created again", pinned.joinCSR(in), csrapprover.ReasonEvidenceIssuer)

	byName := newJoinWorld(t, func(*Config, *awstest.Cloud) {})
	in = byName.node("127.0.0.32", "", joinRole)
	byName.env.aws.RecreateRole(joinRole)
	byName.decide("the role created again, no id configured", byName.joinCSR(in), csrapprover.ReasonApproved)
}
