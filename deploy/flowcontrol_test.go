package deploy

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/apiserver/pkg/util/apihelpers"
)

// apfRequest is what API Priority and Fairness classifies a resource
// request by: who makes it and what it asks.
type apfRequest struct {
	user                             string
	groups                           []string
	verb, group, resource, namespace string
}

func (r apfRequest) String() string {
	where := "cluster-wide"
	if r.namespace != "" {
		where = "in " + r.namespace
	}
	return fmt.Sprintf("%s %s.%s %s as %s", r.verb, r.resource, r.group, where, r.user)
}

// listed is whether x is in list, or list is the wildcard alone (APF's
// rule for verbs, groups, resources and namespaces).
func listed(x string, list []string, wildcard string) bool {
	return slices.Equal(list, []string{wildcard}) || slices.Contains(list, x)
}

func subjectMatches(s flowcontrolv1.Subject, r apfRequest) bool {
	switch s.Kind {
	case flowcontrolv1.SubjectKindUser:
		return s.User != nil && (s.User.Name == flowcontrolv1.NameAll || s.User.Name == r.user)
	case flowcontrolv1.SubjectKindGroup:
		return s.Group != nil && (s.Group.Name == flowcontrolv1.NameAll || slices.Contains(r.groups, s.Group.Name))
	case flowcontrolv1.SubjectKindServiceAccount:
		if s.ServiceAccount == nil {
			return false
		}
		prefix := "system:serviceaccount:" + s.ServiceAccount.Namespace + ":"
		if s.ServiceAccount.Name == flowcontrolv1.NameAll {
			return strings.HasPrefix(r.user, prefix)
		}
		return r.user == prefix+s.ServiceAccount.Name
	}
	return false
}

func resourceRuleMatches(rr flowcontrolv1.ResourcePolicyRule, r apfRequest) bool {
	if !listed(r.verb, rr.Verbs, flowcontrolv1.VerbAll) || !listed(r.resource, rr.Resources, flowcontrolv1.ResourceAll) ||
		!listed(r.group, rr.APIGroups, flowcontrolv1.APIGroupAll) {
		return false
	}
	if r.namespace == "" {
		return rr.ClusterScope
	}
	return listed(r.namespace, rr.Namespaces, flowcontrolv1.NamespaceEvery)
}

// classify is the FlowSchema API Priority and Fairness gives r among the
// apiserver's own (k8s.io/apiserver's bootstrap configuration, the one
// the apiserver in go.mod creates) and mooring's: the first, by matching
// precedence and then name, with a rule whose subjects and resource rules
// match (as k8s.io/apiserver/pkg/util/flowcontrol matches resource
// requests).
func classify(mooring []*flowcontrolv1.FlowSchema, r apfRequest) *flowcontrolv1.FlowSchema {
	all := slices.Concat(bootstrap.MandatoryFlowSchemas, bootstrap.SuggestedFlowSchemas, mooring)
	sort.Sort(apihelpers.FlowSchemaSequence(all))
	for _, fs := range all {
		for _, rule := range fs.Spec.Rules {
			if slices.ContainsFunc(rule.Subjects, func(s flowcontrolv1.Subject) bool { return subjectMatches(s, r) }) &&
				slices.ContainsFunc(rule.ResourceRules, func(rr flowcontrolv1.ResourcePolicyRule) bool { return resourceRuleMatches(rr, r) }) {
				return fs
			}
		}
	}
	return nil
}

// leaseNamespace is where the Deployment's program keeps its Lease: its
// --leader-elect-resource-namespace, else both programs' default.
func leaseNamespace(d *appsv1.Deployment) string {
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if ns, ok := strings.CutPrefix(a, "--leader-elect-resource-namespace="); ok {
			return ns
		}
	}
	return "kube-system"
}

// checkLeaderElectionLevel: the Deployment's leader election (get, create
// and update of Leases in its Lease namespace, what client-go's LeaseLock
// does) is at the built-in level leader-election, by the built-in
// system-leader-election in kube-system and by mooring-leader-election
// elsewhere; everything else the workload asks, Leases by other verbs
// included (and, outside kube-system, Leases in other namespaces), stays at
// level mooring by FlowSchema mooring.
func checkLeaderElectionLevel(t *testing.T, where string, schemas []*flowcontrolv1.FlowSchema, d *appsv1.Deployment) {
	t.Helper()
	ns, sa := d.Namespace, d.Spec.Template.Spec.ServiceAccountName
	user := "system:serviceaccount:" + ns + ":" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	leases := leaseNamespace(d)
	// The built-in one takes kube-system's ServiceAccounts first.
	byLease := "mooring-leader-election"
	if ns == "kube-system" {
		byLease = bootstrap.SuggestedFlowSchemaSystemLeaderElection.Name
	}
	level := bootstrap.SuggestedPriorityLevelConfigurationLeaderElection.Name
	var cases []struct {
		r                 apfRequest
		flowSchema, level string
	}
	add := func(verb, group, resource, namespace, flowSchema, level string) {
		cases = append(cases, struct {
			r                 apfRequest
			flowSchema, level string
		}{apfRequest{user, groups, verb, group, resource, namespace}, flowSchema, level})
	}
	for _, verb := range []string{"get", "create", "update"} {
		add(verb, "coordination.k8s.io", "leases", leases, byLease, level)
	}
	for _, verb := range []string{"list", "watch", "delete", "patch"} {
		add(verb, "coordination.k8s.io", "leases", leases, "mooring", "mooring")
	}
	// A Lease in another namespace: the built-in one takes any of
	// kube-system's ServiceAccounts, mooring's only its own namespace.
	if ns == "kube-system" {
		add("update", "coordination.k8s.io", "leases", "default", byLease, level)
	} else {
		add("update", "coordination.k8s.io", "leases", "default", "mooring", "mooring")
	}
	add("patch", "", "nodes", "", "mooring", "mooring")
	add("update", "certificates.k8s.io", "certificatesigningrequests", "", "mooring", "mooring")
	add("create", "", "events", "default", "mooring", "mooring")
	add("update", "", "configmaps", ns, "mooring", "mooring")
	for _, c := range cases {
		fs := classify(schemas, c.r)
		if fs == nil || fs.Name != c.flowSchema || fs.Spec.PriorityLevelConfiguration.Name != c.level {
			got := "no FlowSchema"
			if fs != nil {
				got = "FlowSchema " + fs.Name + " at level " + fs.Spec.PriorityLevelConfiguration.Name
			}
			t.Errorf("%s: %s: %s, want FlowSchema %s at level %s", where, c.r, got, c.flowSchema, c.level)
		}
	}
}

// TestLeaderElectionFlowSchema: in every layout, kustomize's and the
// chart's in kube-system and in another namespace, in both modes, the
// workload's leader election is at priority level leader-election and the
// rest of its requests at level mooring (checkLeaderElectionLevel); the
// FlowSchema mooring-leader-election names the workload's ServiceAccount
// in the workload's namespace; and the chart refuses a matchingPrecedence
// for FlowSchema mooring that would come before it.
func TestLeaderElectionFlowSchema(t *testing.T) {
	type layout struct {
		schemas     []*flowcontrolv1.FlowSchema
		deployments []*appsv1.Deployment
	}
	layouts := map[string]layout{}
	for dir, m := range renderings(t) {
		var l layout
		for _, r := range m.Resources() {
			switch r.GetKind() {
			case "FlowSchema":
				l.schemas = append(l.schemas, decode[flowcontrolv1.FlowSchema](t, r))
			case "Deployment":
				l.deployments = append(l.deployments, decode[appsv1.Deployment](t, r))
			}
		}
		layouts[dir] = l
	}
	for _, ns := range []string{"kube-system", "mooring-system"} {
		for _, mode := range []string{"ccm", "approver-only"} {
			var l layout
			for _, obj := range renderChart(t, "ci/aws-values.yaml", nil, "--namespace", ns, "--set", "mode="+mode) {
				var into any
				switch obj["kind"] {
				case "FlowSchema":
					fs := new(flowcontrolv1.FlowSchema)
					l.schemas, into = append(l.schemas, fs), fs
				case "Deployment":
					d := new(appsv1.Deployment)
					l.deployments, into = append(l.deployments, d), d
				default:
					continue
				}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, into, true); err != nil {
					t.Fatal(err)
				}
			}
			layouts["chart, mode "+mode+", namespace "+ns] = l
		}
	}

	for where, l := range layouts {
		if len(l.deployments) != 1 {
			t.Errorf("%s: %d Deployments", where, len(l.deployments))
			continue
		}
		d := l.deployments[0]
		i := slices.IndexFunc(l.schemas, func(fs *flowcontrolv1.FlowSchema) bool { return fs.Name == "mooring-leader-election" })
		if i < 0 {
			t.Errorf("%s: no FlowSchema mooring-leader-election", where)
		} else if !slices.ContainsFunc(l.schemas[i].Spec.Rules[0].Subjects, func(s flowcontrolv1.Subject) bool {
			return s.ServiceAccount != nil && s.ServiceAccount.Name == d.Spec.Template.Spec.ServiceAccountName && s.ServiceAccount.Namespace == d.Namespace
		}) {
			t.Errorf("%s: FlowSchema mooring-leader-election's subjects %+v do not name %s/%s", where, l.schemas[i].Spec.Rules[0].Subjects,
				d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
		}
		checkLeaderElectionLevel(t, where, l.schemas, d)
	}

	for _, bad := range []string{"150", "100"} {
		args := []string{"template", "mooring", chartDir, "--kube-version", kubeVersion(), "--values", filepath.Join(chartDir, "ci/aws-values.yaml"),
			"--set", "flowControl.matchingPrecedence=" + bad}
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err == nil {
			t.Errorf("helm template with flowControl.matchingPrecedence=%s succeeded:\n%.300s", bad, out)
		}
	}
}
