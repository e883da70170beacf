package awstest

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Route tables through the SDK's EC2 client: described with their tags and
// routes (an instance's blackhole once it is terminated), routes created
// once per destination and deleted, source/destination checks turned off,
// and EC2's errors.
func TestRouteTables(t *testing.T) {
	c, _ := newCloud(t, nil)
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	in := c.Put(Instance{PrivateIP: ip(1)})
	other := c.PutRouteTable(RouteTable{Tags: map[string]string{"kubernetes.io/cluster/other": "owned"}})
	rt := c.PutRouteTable(RouteTable{Tags: map[string]string{"kubernetes.io/cluster/c1": "owned"},
		Routes: []Route{{Destination: "0.0.0.0/0", GatewayID: "igw-0123456789abcdef0"}}})

	out, err := client.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{
		Filters: []ec2types.Filter{{Name: aws.String("tag-key"), Values: []string{"kubernetes.io/cluster/c1"}}}})
	if err != nil || len(out.RouteTables) != 1 || aws.ToString(out.RouteTables[0].RouteTableId) != rt.ID ||
		len(out.RouteTables[0].Routes) != 2 || aws.ToString(out.RouteTables[0].Routes[0].GatewayId) != "local" {
		t.Fatalf("DescribeRouteTables: %+v, %v", out, err)
	}
	all, err := client.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{})
	if err != nil || len(all.RouteTables) != 2 {
		t.Fatalf("DescribeRouteTables of all: %v, %v", all, err)
	}

	create := func(dest string) error {
		_, err := client.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: aws.String(rt.ID), DestinationCidrBlock: aws.String(dest), InstanceId: aws.String(in.ID)})
		return err
	}
	if err := create("10.244.1.0/24"); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, create("10.244.1.0/24"), http.StatusBadRequest, "RouteAlreadyExists")
	wantAPIError(t, create("10.244.1.5/24"), http.StatusBadRequest, "InvalidParameterValue")
	_, err = client.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: aws.String(rt.ID), DestinationCidrBlock: aws.String("10.244.2.0/24"), InstanceId: aws.String("i-0000000000000dead")})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidInstanceID.NotFound")
	_, err = client.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: aws.String("rtb-0000000000000dead"), DestinationCidrBlock: aws.String("10.244.2.0/24"), InstanceId: aws.String(in.ID)})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidRouteTableID.NotFound")

	routeOf := func(dest string) (ec2types.Route, bool) {
		t.Helper()
		out, err := client.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{RouteTableIds: []string{rt.ID}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.RouteTables[0].Routes {
			if aws.ToString(r.DestinationCidrBlock) == dest {
				return r, true
			}
		}
		return ec2types.Route{}, false
	}
	if r, ok := routeOf("10.244.1.0/24"); !ok || aws.ToString(r.InstanceId) != in.ID || r.State != ec2types.RouteStateActive {
		t.Fatalf("the route: %+v", r)
	}
	if err := c.SetState(in.ID, "terminated"); err != nil {
		t.Fatal(err)
	}
	if r, _ := routeOf("10.244.1.0/24"); r.State != ec2types.RouteStateBlackhole {
		t.Fatalf("the route to a terminated instance: %s, want blackhole", r.State)
	}

	del := func(dest string) error {
		_, err := client.DeleteRoute(ctx, &ec2.DeleteRouteInput{RouteTableId: aws.String(rt.ID), DestinationCidrBlock: aws.String(dest)})
		return err
	}
	if err := del("10.244.1.0/24"); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, del("10.244.1.0/24"), http.StatusBadRequest, "InvalidRoute.NotFound")
	wantAPIError(t, del(VPCCIDR), http.StatusBadRequest, "InvalidParameterValue")
	if got, _ := c.RouteTable(rt.ID); len(got.Routes) != 2 {
		t.Fatalf("routes left: %+v", got.Routes)
	}
	if got, _ := c.RouteTable(other.ID); len(got.Routes) != 1 {
		t.Fatalf("the other table: %+v", got.Routes)
	}

	live := c.Put(Instance{PrivateIP: ip(2)})
	if _, err := client.ModifyInstanceAttribute(ctx, &ec2.ModifyInstanceAttributeInput{InstanceId: aws.String(live.ID),
		SourceDestCheck: &ec2types.AttributeBooleanValue{Value: aws.Bool(false)}}); err != nil || c.SourceDestCheck(live.ID) {
		t.Fatalf("ModifyInstanceAttribute: %v; check on: %v", err, c.SourceDestCheck(live.ID))
	}
	d, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{live.ID}})
	if err != nil || aws.ToBool(d.Reservations[0].Instances[0].SourceDestCheck) {
		t.Fatalf("DescribeInstances after the check is off: %v", err)
	}
	for _, a := range []string{ActionDescribeRouteTables, ActionCreateRoute, ActionDeleteRoute, ActionModifyInstanceAttribute} {
		if c.Calls(a) == 0 {
			t.Errorf("%s not counted", a)
		}
	}
}
