package awstest

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// ids lists the instance ids of a DescribeInstances answer in order.
func ids(out *ec2.DescribeInstancesOutput) []string {
	var got []string
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			got = append(got, aws.ToString(in.InstanceId))
		}
	}
	return got
}

// The SDK's paginator walks 2,500 instances in three pages of at most 1000
// along the NextToken chain, each instance once, in id order.
func TestDescribeInstancesPagination(t *testing.T) {
	c, _ := newCloud(t, nil)
	var want []string
	for i := range 2500 {
		want = append(want, c.Put(Instance{PrivateIP: ip(i), Tags: map[string]string{"kubernetes.io/cluster/a": "owned"}}).ID)
	}
	slices.Sort(want)
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()

	p := ec2.NewDescribeInstancesPaginator(client, &ec2.DescribeInstancesInput{
		MaxResults: aws.Int32(1000),
		Filters:    []types.Filter{{Name: aws.String("tag-key"), Values: []string{"kubernetes.io/cluster/a"}}},
	})
	var got []string
	var sizes []int
	var tokens []string
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(ids(out)))
		got = append(got, ids(out)...)
		tokens = append(tokens, aws.ToString(out.NextToken))
	}
	if !slices.Equal(sizes, []int{1000, 1000, 500}) {
		t.Fatalf("page sizes %v, want [1000 1000 500]", sizes)
	}
	if tokens[0] == "" || tokens[1] == "" || tokens[0] == tokens[1] || tokens[2] != "" {
		t.Fatalf("NextToken chain %q: want two distinct tokens, then none", tokens)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paginated ids differ from the instances put (got %d, want %d)", len(got), len(want))
	}
	if n := c.Calls(ActionDescribeInstances); n != 3 {
		t.Fatalf("Calls(DescribeInstances) = %d, want 3", n)
	}

	// Without MaxResults, one answer holds everything.
	out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids(out)) != 2500 || out.NextToken != nil {
		t.Fatalf("unpaginated: %d instances, NextToken %v", len(ids(out)), out.NextToken)
	}

	// A token belongs to its query: with other filters it is refused, and a
	// made-up token too.
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: aws.String(tokens[0])})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidPaginationToken")
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: aws.String("not-a-token")})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidPaginationToken")
	// MaxResults is 5-1000, and does not go with instance ids.
	for _, n := range []int32{4, 1001} {
		_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(n)})
		wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")
	}
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), InstanceIds: want[:1]})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterCombination")
}

// Deleting instances between pages neither repeats nor skips the others.
func TestDescribeInstancesPaginationIsACursor(t *testing.T) {
	c, _ := newCloud(t, nil)
	var all []string
	for i := range 12 {
		all = append(all, c.Put(Instance{PrivateIP: ip(i)}).ID)
	}
	slices.Sort(all)
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	first, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5)})
	if err != nil {
		t.Fatal(err)
	}
	c.Delete(all[0]) // already seen
	c.Delete(all[6]) // not seen yet
	second, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(5), NextToken: first.NextToken})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{all[5], all[7], all[8], all[9], all[10]}
	if got := ids(second); !slices.Equal(got, want) {
		t.Fatalf("second page %v, want %v", got, want)
	}
}

// Every filter, wildcards, OR within a filter's values and AND across
// filters, as the SDK serializes them.
func TestDescribeInstancesFilters(t *testing.T) {
	c, _ := newCloud(t, nil)
	a := c.Put(Instance{PrivateIP: "127.1.0.1", Tags: map[string]string{"kubernetes.io/cluster/a": "owned", "Name": "web-1"}, InstanceType: "t3.small"})
	b := c.Put(Instance{PrivateIP: "127.1.0.2", Tags: map[string]string{"kubernetes.io/cluster/a": "shared", "Name": "web-2"}, Zone: "us-east-1b"})
	s := c.Put(Instance{PrivateIP: "127.1.0.3", Tags: map[string]string{"kubernetes.io/cluster/b": "owned"}, State: "stopped"})
	x := c.Put(Instance{PrivateIP: "127.1.0.4", State: "terminated", Tags: map[string]string{"Name": "gone"}})
	client := ec2Client(c, staticCreds(testUser))
	f := func(name string, values ...string) types.Filter {
		return types.Filter{Name: aws.String(name), Values: values}
	}
	cases := []struct {
		name    string
		filters []types.Filter
		want    []string
	}{
		{"none", nil, []string{a.ID, b.ID, s.ID, x.ID}},
		{"tag-key", []types.Filter{f("tag-key", "kubernetes.io/cluster/a")}, []string{a.ID, b.ID}},
		{"tag-key wildcard", []types.Filter{f("tag-key", "kubernetes.io/cluster/*")}, []string{a.ID, b.ID, s.ID}},
		{"tag value", []types.Filter{f("tag:kubernetes.io/cluster/a", "owned")}, []string{a.ID}},
		{"tag values OR", []types.Filter{f("tag:kubernetes.io/cluster/a", "owned", "shared")}, []string{a.ID, b.ID}},
		{"tag ? wildcard", []types.Filter{f("tag:Name", "web-?")}, []string{a.ID, b.ID}},
		{"tag-value", []types.Filter{f("tag-value", "gone")}, []string{x.ID}},
		{"state", []types.Filter{f("instance-state-name", "running")}, []string{a.ID, b.ID}},
		{"states OR", []types.Filter{f("instance-state-name", "stopped", "terminated")}, []string{s.ID, x.ID}},
		{"state code", []types.Filter{f("instance-state-code", "80")}, []string{s.ID}},
		{"instance-id", []types.Filter{f("instance-id", b.ID, s.ID)}, []string{b.ID, s.ID}},
		{"private-dns-name", []types.Filter{f("private-dns-name", "ip-127-1-0-1.ec2.internal")}, []string{a.ID}},
		// A terminated instance has no private DNS name any more.
		{"private-dns-name of terminated", []types.Filter{f("private-dns-name", x.PrivateDNSName)}, nil},
		{"private-ip-address", []types.Filter{f("private-ip-address", "127.1.0.3")}, []string{s.ID}},
		{"availability-zone", []types.Filter{f("availability-zone", "us-east-1b")}, []string{b.ID}},
		{"instance-type", []types.Filter{f("instance-type", "t3.*")}, []string{a.ID}},
		{"AND", []types.Filter{f("tag-key", "kubernetes.io/cluster/a"), f("instance-type", "m5.large")}, []string{b.ID}},
		{"no match", []types.Filter{f("tag:Name", "web-1"), f("instance-state-name", "stopped")}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := client.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: tc.filters})
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if got := ids(out); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
	_, err := client.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{f("vpc-id", "vpc-1")}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")
	_, err = client.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []types.Filter{f("tag-key")}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")
}

// InstanceId.N: found, missing (one or several), malformed, deleted.
func TestDescribeInstancesByID(t *testing.T) {
	c, _ := newCloud(t, nil)
	a := c.Put(Instance{PrivateIP: "127.1.0.1"})
	b := c.Put(Instance{PrivateIP: "127.1.0.2"})
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()

	out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{b.ID, a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.ID, b.ID}
	slices.Sort(want)
	if got := ids(out); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{a.ID, "i-0123456789abcdef0"}})
	ae := wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	wantMessage(t, ae, "'i-0123456789abcdef0' does not exist")
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0", "i-0123456789abcdef1"}})
	ae = wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	wantMessage(t, ae, "'i-0123456789abcdef0, i-0123456789abcdef1' do not exist")
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"node-1"}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.Malformed")

	c.Delete(a.ID)
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{a.ID}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	// Filters apply to the instances named.
	out, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{
		InstanceIds: []string{b.ID},
		Filters:     []types.Filter{{Name: aws.String("instance-state-name"), Values: []string{"stopped"}}},
	})
	if err != nil || len(ids(out)) != 0 {
		t.Fatalf("filtered by id and state: %v, %v", ids(out), err)
	}
	// DryRun answers DryRunOperation once the call would have succeeded.
	_, err = client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{DryRun: aws.Bool(true)})
	wantAPIError(t, err, http.StatusPreconditionFailed, "DryRunOperation")
}

// The SDK decodes every field an instance has, as AWS would show it in each
// state.
func TestDescribeInstancesFields(t *testing.T) {
	c, clk := newCloud(t, func(o *Options) { o.Region = "eu-west-1" })
	in := c.Put(Instance{
		PrivateIP:     "127.1.0.9",
		PublicIP:      "127.2.0.9",
		PublicDNSName: "ec2-127-2-0-9.eu-west-1.compute.amazonaws.com",
		Zone:          "eu-west-1c",
		InstanceType:  "c6i.xlarge",
		Tags:          map[string]string{"b": "2", "a": "1"},
		Role:          "node-role",
		MetadataTags:  true,
	})
	if in.PrivateDNSName != "ip-127-1-0-9.eu-west-1.compute.internal" {
		t.Fatalf("default private DNS name %q", in.PrivateDNSName)
	}
	// The test moves the cloud's clock: sign by it.
	client := ec2Client(c, staticCreds(testUser), func(o *ec2.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now} })
	describe := func() types.Instance {
		t.Helper()
		out, err := client.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{in.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
			t.Fatalf("want one reservation of one instance, got %+v", out.Reservations)
		}
		if aws.ToString(out.Reservations[0].OwnerId) != c.Account() {
			t.Fatalf("owner %q", aws.ToString(out.Reservations[0].OwnerId))
		}
		return out.Reservations[0].Instances[0]
	}
	got := describe()
	checks := []struct{ name, got, want string }{
		{"id", aws.ToString(got.InstanceId), in.ID},
		{"state", string(got.State.Name), "running"},
		{"zone", aws.ToString(got.Placement.AvailabilityZone), "eu-west-1c"},
		{"type", string(got.InstanceType), "c6i.xlarge"},
		{"private DNS", aws.ToString(got.PrivateDnsName), in.PrivateDNSName},
		{"public DNS", aws.ToString(got.PublicDnsName), in.PublicDNSName},
		{"private IP", aws.ToString(got.PrivateIpAddress), "127.1.0.9"},
		{"public IP", aws.ToString(got.PublicIpAddress), "127.2.0.9"},
		{"profile", aws.ToString(got.IamInstanceProfile.Arn), "arn:aws:iam::123456789012:instance-profile/node-role"},
		{"image", aws.ToString(got.ImageId), in.ImageID},
		{"metadata tags", string(got.MetadataOptions.InstanceMetadataTags), "enabled"},
		{"http tokens", string(got.MetadataOptions.HttpTokens), "required"},
		{"eni status", string(got.NetworkInterfaces[0].Status), "in-use"},
		{"eni IP", aws.ToString(got.NetworkInterfaces[0].PrivateIpAddresses[0].PrivateIpAddress), "127.1.0.9"},
		{"eni public IP", aws.ToString(got.NetworkInterfaces[0].Association.PublicIp), "127.2.0.9"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if aws.ToInt32(got.State.Code) != 16 {
		t.Errorf("state code %d, want 16", aws.ToInt32(got.State.Code))
	}
	if !got.LaunchTime.Equal(in.LaunchTime) || in.LaunchTime.IsZero() {
		t.Errorf("launch time %v, want %v", got.LaunchTime, in.LaunchTime)
	}
	// The primary network interface (device 0 on card 0) was attached when
	// the instance was created.
	attachment := got.NetworkInterfaces[0].Attachment
	if aws.ToInt32(attachment.DeviceIndex) != 0 || aws.ToInt32(attachment.NetworkCardIndex) != 0 ||
		attachment.AttachTime == nil || !attachment.AttachTime.Equal(in.Created) || in.Created.IsZero() {
		t.Errorf("primary interface attachment %+v, want attached at %v", attachment, in.Created)
	}
	if len(got.Tags) != 2 || aws.ToString(got.Tags[0].Key) != "a" || aws.ToString(got.Tags[1].Value) != "2" {
		t.Errorf("tags %+v", got.Tags)
	}

	// Stopped: no public address; a start moves the launch time, not the
	// creation time.
	if err := c.SetState(in.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	got = describe()
	if got.State.Name != types.InstanceStateNameStopped || aws.ToInt32(got.State.Code) != 80 || got.PublicIpAddress != nil || aws.ToString(got.PublicDnsName) != "" {
		t.Errorf("stopped: state %v/%d, public %v %q", got.State.Name, aws.ToInt32(got.State.Code), got.PublicIpAddress, aws.ToString(got.PublicDnsName))
	}
	clk.Advance(time.Hour)
	if err := c.SetState(in.ID, "running"); err != nil {
		t.Fatal(err)
	}
	if got = describe(); !got.LaunchTime.Equal(clk.Now()) {
		t.Errorf("after a start, launch time %v, want %v", got.LaunchTime, clk.Now())
	}
	if at := got.NetworkInterfaces[0].Attachment.AttachTime; at == nil || !at.Equal(in.Created) {
		t.Errorf("after a start, primary interface attached at %v, want still %v", at, in.Created)
	}
	// Terminated: no addresses, no DNS names, and no way back.
	if err := c.SetState(in.ID, "terminated"); err != nil {
		t.Fatal(err)
	}
	got = describe()
	if aws.ToInt32(got.State.Code) != 48 || got.PrivateIpAddress != nil || aws.ToString(got.PrivateDnsName) != "" || len(got.NetworkInterfaces) != 0 {
		t.Errorf("terminated: code %d, private IP %v, DNS %q, %d interfaces", aws.ToInt32(got.State.Code), got.PrivateIpAddress, aws.ToString(got.PrivateDnsName), len(got.NetworkInterfaces))
	}
	if err := c.SetState(in.ID, "running"); err == nil {
		t.Error("a terminated instance started again")
	}
}

// NewInstanceDelay: a new instance is left out of lists and unknown by id
// (InvalidInstanceID.NotFound) until the delay is over, as EC2's eventual
// consistency may have it; its metadata service answers all along, and a
// later Put of it does not hide it again.
func TestNewInstanceDelay(t *testing.T) {
	c, clk := newCloud(t, func(o *Options) { o.NewInstanceDelay = 2 * time.Minute })
	old := c.Put(Instance{PrivateIP: "127.1.0.1"})
	clk.Advance(2 * time.Minute)
	fresh := c.Put(Instance{PrivateIP: "127.1.0.2", Role: "node"})
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	list := func() []string {
		t.Helper()
		out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		if err != nil {
			t.Fatal(err)
		}
		return ids(out)
	}
	if got := list(); !slices.Equal(got, []string{old.ID}) || c.Visible(fresh.ID) || !c.Visible(old.ID) {
		t.Fatalf("listed %v during the delay; want only %s", got, old.ID)
	}
	_, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{fresh.ID}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	if _, err := instanceRoleCreds(t, c, fresh.ID).Retrieve(ctx); err != nil {
		t.Fatalf("metadata during the delay: %v", err)
	}

	clk.Advance(2*time.Minute - time.Second)
	if got := list(); len(got) != 1 {
		t.Fatalf("listed %v a second before the delay is over", got)
	}
	clk.Advance(time.Second)
	c.Put(Instance{ID: fresh.ID, PrivateIP: "127.1.0.2", Role: "node", State: "stopped"})
	if got := list(); len(got) != 2 {
		t.Fatalf("listed %v after the delay", got)
	}
	if out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{fresh.ID}}); err != nil || len(ids(out)) != 1 {
		t.Fatalf("by id after the delay: %v, %v", ids(out), err)
	}
	c.SetNewInstanceDelay(0)
	if now := c.Put(Instance{PrivateIP: "127.1.0.3"}); !c.Visible(now.ID) {
		t.Fatal("hidden without a delay")
	}
}

// Describes sorts answered DescribeInstances calls into lookups by id (how
// many ids, the most in one call), lookups by private DNS name or address,
// and lists; a filter on a private DNS name finds the one instance among
// many, and a terminated instance has no name to be found by.
func TestDescribeStats(t *testing.T) {
	c, _ := newCloud(t, nil)
	var all []Instance
	for i := range 50 {
		all = append(all, c.Put(Instance{PrivateIP: ip(i)}))
	}
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	byName := func(name string) []string {
		t.Helper()
		out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{
			Filters: []types.Filter{{Name: aws.String("private-dns-name"), Values: []string{name}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids(out)
	}
	if got := byName(all[7].PrivateDNSName); !slices.Equal(got, []string{all[7].ID}) {
		t.Fatalf("by private DNS name: %v, want [%s]", got, all[7].ID)
	}
	if _, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{all[1].ID, all[2].ID, all[3].ID}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("instance-id"), Values: []string{all[4].ID}}},
	}); err != nil {
		t.Fatal(err)
	}
	for p := ec2.NewDescribeInstancesPaginator(client, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(20)}); p.HasMorePages(); {
		if _, err := p.NextPage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A DryRun is not counted.
	_, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{DryRun: aws.Bool(true)})
	wantAPIError(t, err, http.StatusPreconditionFailed, "DryRunOperation")
	want := DescribeStats{ByID: 2, IDs: 4, MaxIDs: 3, ByAddress: 1, Listed: 3}
	if got := c.Describes(); got != want {
		t.Fatalf("Describes() = %+v, want %+v", got, want)
	}
	if err := c.SetState(all[7].ID, "terminated"); err != nil {
		t.Fatal(err)
	}
	if got := byName(all[7].PrivateDNSName); len(got) != 0 {
		t.Fatalf("a terminated instance found by its private DNS name: %v", got)
	}
	c.ResetDescribes()
	if got := c.Describes(); got != (DescribeStats{}) {
		t.Fatalf("after ResetDescribes: %+v", got)
	}
}
