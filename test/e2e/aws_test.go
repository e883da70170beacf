package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	awsagentid "github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// awsNodesJoin (TestSignedClouds/AWS): mooring on AWS, against the AWS-compatible endpoint
// (cloud/aws/awstest: EC2 Query API, STS that verifies SigV4, IMDSv2 per
// instance) with the real SDK in every binary. Three EC2 instances with an
// instance profile join the shared bed: each mooring-agent (cloud: aws) reads
// IMDSv2, sends a GetCallerIdentity request it signed with its role's
// credentials, bound to its CSR key, as evidence; the standalone
// mooring-csr-approver (--cloud-provider=aws) replays it to STS and checks
// the answer and the EC2 record; mooring-ccm (--cloud-provider=aws)
// initializes the Nodes, named by private DNS name, with aws:/// providerIDs;
// serving certificates are approved. Then AWS-specific attacks, made with
// the agent's own code and edited, are denied by the real approver.
func awsNodesJoin(t *testing.T, bed *signedBed) {
	j := joinThree(t, bed, harness.StartAWSCloud, "EC2 instances", "ec2")
	c, aws, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		if !strings.HasPrefix(name, "ip-127-0-77-") || !strings.HasSuffix(name, ".ec2.internal") {
			t.Fatalf("node name %q is not the instance's private DNS name", name)
		}
		node := waitInitialized(ctx, t, c, name)
		zone := node.Labels[corev1.LabelTopologyZone]
		if !strings.HasPrefix(node.Spec.ProviderID, "aws:///"+zone+"/i-") || zone != aws.Region()+"a" ||
			node.Labels[corev1.LabelInstanceTypeStable] != "m5.large" || node.Labels[corev1.LabelTopologyRegion] != aws.Region() {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
	t.Logf("3 nodes Ready, initialized with aws:/// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	if n := aws.Calls("GetCallerIdentity"); n < 3 {
		t.Errorf("STS answered %d GetCallerIdentity calls, want at least one per join", n)
	}
	t.Logf("cloud calls: DescribeInstances %d, GetCallerIdentity %d", aws.Calls("DescribeInstances"), aws.Calls("GetCallerIdentity"))

	awsAttacks(ctx, t, c, aws)
}

// awsAttacks joins through the real approver with AWS evidence an attacker
// can make: each CSR is denied with its reason, and a good one passes.
func awsAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, aws *harness.AWSCloud) {
	t.Helper()
	mine := aws.AddNode(e2eCluster, "attacker")
	other := aws.Put(awstest.Instance{PrivateIP: "127.0.78.10", Role: "not-a-node-role",
		Tags: map[string]string{harness.ClusterTag(e2eCluster): "owned"}})
	identity := func(in awstest.Instance) nodeid.Identity {
		md, err := aws.IMDS(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		id, err := awsagentid.NewNodeIdentity(nodeid.Config{MetadataURL: md,
			Settings: map[string]string{"stsEndpoint": aws.Endpoint()}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// sign is the agent's evidence, then edited as JSON.
	sign := func(in awstest.Instance, binding string, edit func(map[string]any)) []evidence.Block {
		b, err := identity(in).Evidence(ctx, binding)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			var doc map[string]any
			if err := json.Unmarshal(b.Data, &doc); err != nil {
				t.Fatal(err)
			}
			edit(doc)
			if b.Data, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
		}
		return []evidence.Block{b}
	}
	var replayed []evidence.Block
	runAttacks(ctx, t, c, []attack{
		{"signed for another key's binding", mine.PrivateDNSName, func(string) []evidence.Block {
			return sign(mine, "b-of-another-key", nil)
		}, "EvidenceNotBoundToKey"},
		{"stale date", mine.PrivateDNSName, func(binding string) []evidence.Block {
			return sign(mine, binding, func(d map[string]any) {
				d["x-amz-date"] = time.Now().UTC().Add(-16 * time.Minute).Format("20060102T150405Z")
			})
		}, "EvidenceExpired"},
		{"role not allowed to join", other.PrivateDNSName, func(binding string) []evidence.Block {
			return sign(other, binding, nil)
		}, "EvidenceWrongIssuer"},
		{"binding swapped after signing", mine.PrivateDNSName, func(binding string) []evidence.Block {
			ev := sign(mine, "b-the-signer-saw", nil)
			var doc map[string]any
			_ = json.Unmarshal(ev[0].Data, &doc)
			doc["x-mooring-binding"] = binding
			ev[0].Data, _ = json.Marshal(doc)
			return ev
		}, "EvidenceSignatureInvalid"},
		{"endpoint injected through the evidence", mine.PrivateDNSName, func(binding string) []evidence.Block {
			return sign(mine, binding, func(d map[string]any) { d["host"] = "127.0.0.1:9"; d["url"] = "http://127.0.0.1:9/" })
		}, "EvidenceMalformed"},
		{"oversized evidence", mine.PrivateDNSName, func(binding string) []evidence.Block {
			return sign(mine, binding, func(d map[string]any) { d["x-amz-security-token"] = strings.Repeat("A", 9<<10) })
		}, "EvidenceMalformed"},
		{"another instance's node name", "ip-127-0-77-10.ec2.internal", func(binding string) []evidence.Block {
			return sign(mine, binding, nil)
		}, "NodeNameMismatch"},
		{"good evidence", mine.PrivateDNSName, func(binding string) []evidence.Block {
			replayed = sign(mine, binding, nil)
			return replayed
		}, ""},
		{"the approved evidence copied onto another key", mine.PrivateDNSName, func(string) []evidence.Block { return replayed }, "EvidenceNotBoundToKey"},
	})
}
