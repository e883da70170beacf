package aws

import (
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/kit"
)

// minimalConfig has every required field.
const minimalConfig = "region: us-east-1\nclusterID: c1\naccount: \"123456789012\"\nnodeRoles: [node]\n"

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(minimalConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Region != "us-east-1" || c.ClusterID != "c1" || c.Account != "123456789012" || len(c.NodeRoles) != 1 || c.NodeRoles[0] != "node" {
		t.Fatalf("fields: %+v", c)
	}
	if c.InstanceMaxAge.Duration != 30*time.Second || c.MinRefreshInterval.Duration != 2*time.Second ||
		c.RequestTimeout.Duration != 30*time.Second || c.LoadBalancers != LoadBalancersNone || c.NodeNamePolicy != "" {
		t.Fatalf("defaults: %+v", c)
	}
	if got := c.EffectiveSTSEndpoint(); got != "https://sts.us-east-1.amazonaws.com" {
		t.Fatalf("default STS endpoint %q", got)
	}
	if got := c.ClusterTagKey(); got != "kubernetes.io/cluster/c1" {
		t.Fatalf("cluster tag key %q", got)
	}
	// The same in JSON, with every optional field set.
	c, err = ParseConfig(strings.NewReader(`{"region":"eu-west-3","clusterID":"prod.example.com","account":"000000000001",
		"nodeRoles":["a","b"],"nodeInstanceProfiles":["a-profile","b"],"nodeRoleIDs":{"b":"AROAEXAMPLEEXAMPLE01"},"nodeNamePolicy":"Tag:NodeName","ec2Endpoint":"https://ec2.example.com/base",
		"stsEndpoint":"https://sts.example.com","instanceMaxAge":"1m","minRefreshInterval":"5s","requestTimeout":"3s",
		"loadBalancers":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectiveSTSEndpoint() != "https://sts.example.com" || c.InstanceMaxAge.Duration != time.Minute ||
		c.MinRefreshInterval.Duration != 5*time.Second || c.RequestTimeout.Duration != 3*time.Second ||
		len(c.NodeInstanceProfiles) != 2 || c.NodeInstanceProfiles[0] != "a-profile" || c.NodeRoleIDs["b"] != "AROAEXAMPLEEXAMPLE01" {
		t.Fatalf("JSON: %+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown field", minimalConfig + "bogus: 1\n", "bogus"},
		{"secret-like unknown field", minimalConfig + "secretAccessKey: x\n", "secretAccessKey"},
		{"no region", "clusterID: c1\naccount: \"123456789012\"\nnodeRoles: [node]\n", "region is required"},
		{"bad region", strings.Replace(minimalConfig, "us-east-1", "evil.com/x", 1), "not an AWS region"},
		{"no clusterID", "region: us-east-1\naccount: \"123456789012\"\nnodeRoles: [node]\n", "clusterID is required"},
		{"clusterID with a slash", strings.Replace(minimalConfig, "c1", "a/b", 1), "clusterID"},
		{"clusterID too long", strings.Replace(minimalConfig, "c1", strings.Repeat("x", 107), 1), "clusterID"},
		{"bad policy", minimalConfig + "nodeNamePolicy: Hostname\n", "nodeNamePolicy"},
		{"bad tag policy", minimalConfig + "nodeNamePolicy: \"Tag:\"\n", "nodeNamePolicy"},
		{"ec2Endpoint not a URL", minimalConfig + "ec2Endpoint: ec2.example.com\n", "ec2Endpoint"},
		{"ec2Endpoint plain http", minimalConfig + "ec2Endpoint: http://ec2.example.com\n", "ec2Endpoint"},
		{"ec2Endpoint with a query", minimalConfig + "ec2Endpoint: https://ec2.example.com/?a=b\n", "ec2Endpoint"},
		{"stsEndpoint with credentials", minimalConfig + "stsEndpoint: https://u:p@sts.example.com\n", "stsEndpoint"},
		{"stsEndpoint with a path", minimalConfig + "stsEndpoint: https://sts.example.com/x\n", "stsEndpoint"},
		{"global stsEndpoint outside us-east-1", strings.Replace(minimalConfig, "us-east-1", "eu-west-1", 1) + "stsEndpoint: https://sts.amazonaws.com\n", "global endpoint"},
		{"stsEndpoint of another region", minimalConfig + "stsEndpoint: https://sts.us-west-2.amazonaws.com\n", "region us-west-2's"},
		{"stsEndpoint plain http", minimalConfig + "stsEndpoint: http://10.0.0.1\n", "stsEndpoint"},
		{"no account", "region: us-east-1\nclusterID: c1\nnodeRoles: [node]\n", "account is required"},
		{"short account", strings.Replace(minimalConfig, "123456789012", "12345", 1), "12-digit"},
		{"no nodeRoles", "region: us-east-1\nclusterID: c1\naccount: \"123456789012\"\n", "nodeRoles is required"},
		{"empty nodeRoles", strings.Replace(minimalConfig, "[node]", "[]", 1), "nodeRoles is required"},
		{"role ARN", strings.Replace(minimalConfig, "[node]", "[\"arn:aws:iam::123456789012:role/node\"]", 1), "is an ARN"},
		{"bad role name", strings.Replace(minimalConfig, "[node]", "[\"a b\"]", 1), "not an IAM role name"},
		{"profile ARN", minimalConfig + "nodeInstanceProfiles: [\"arn:aws:iam::123456789012:instance-profile/node\"]\n", "nodeInstanceProfiles: \"arn:aws:iam::123456789012:instance-profile/node\" is an ARN"},
		{"bad profile name", minimalConfig + "nodeInstanceProfiles: [\"node/profile\"]\n", "not an IAM instance profile name"},
		{"role id of another role", minimalConfig + "nodeRoleIDs: {admin: AROAEXAMPLEEXAMPLE01}\n", "nodeRoleIDs: role id of \"admin\": not a node role"},
		{"user id as role id", minimalConfig + "nodeRoleIDs: {node: AIDAEXAMPLEEXAMPLE01}\n", "not an IAM role's unique id"},
		{"role id too short", minimalConfig + "nodeRoleIDs: {node: AROA123}\n", "not an IAM role's unique id"},
		{"session UserId as role id", minimalConfig + "nodeRoleIDs: {node: \"AROAEXAMPLEEXAMPLE01:i-0123abcd\"}\n", "not an ARN or a session's UserId"},
		{"role ARN as role id", minimalConfig + "nodeRoleIDs: {node: \"arn:aws:iam::123456789012:role/node\"}\n", "holds a colon"},
		{"profile name too long", minimalConfig + "nodeInstanceProfiles: [" + strings.Repeat("p", 129) + "]\n", "not an IAM instance profile name"},
		{"negative instanceMaxAge", minimalConfig + "instanceMaxAge: -1s\n", "instanceMaxAge"},
		{"negative minRefreshInterval", minimalConfig + "minRefreshInterval: -1s\n", "minRefreshInterval"},
		{"negative requestTimeout", minimalConfig + "requestTimeout: -1s\n", "requestTimeout"},
		{"not a duration", minimalConfig + "instanceMaxAge: soon\n", "soon"},
		{"bad loadBalancers", minimalConfig + "loadBalancers: elb\n", "loadBalancers \"elb\""},
		{"upstream load balancers without their config", minimalConfig + "loadBalancers: upstream\n", "needs upstreamConfig"},
		{"upstreamConfig without upstream", minimalConfig + "upstreamConfig: /etc/aws.conf\n", "upstreamConfig is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := ParseConfig(strings.NewReader("nodeNamePolicy: Hostname\nrequestTimeout: -1s\nloadBalancers: elb\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"region", "clusterID", "nodeNamePolicy", "account", "nodeRoles", "requestTimeout", "loadBalancers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

func TestParseConfigInput(t *testing.T) {
	if _, err := ParseConfig(nil); err == nil || !strings.Contains(err.Error(), "--cloud-config is required") {
		t.Fatalf("nil reader: %v", err)
	}
	big := minimalConfig + "# " + strings.Repeat("x", kit.MaxConfigSize) + "\n"
	if _, err := ParseConfig(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized config: %v", err)
	}
}
