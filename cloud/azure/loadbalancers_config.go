package azure

import (
	"fmt"
	"regexp"
)

// DefaultLoadBalancerName is the cluster load balancer's name when the
// config names none: cloud-provider-azure's (its --cluster-name's
// default).
const DefaultLoadBalancerName = "kubernetes"

// Azure names of load balancers, virtual networks, subnets and security
// groups: 1-80 letters, digits, _ . -, starting with a letter or digit,
// ending with a letter, digit or _.
var networkNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-\w.]{0,78}\w)?$`)

func (c *Config) loadBalancerDefaults() {
	if c.LoadBalancerName == "" {
		c.LoadBalancerName = DefaultLoadBalancerName
	}
}

func (c *Config) validateLoadBalancers() []error {
	var errs []error
	// The internal load balancer's name is 9 longer.
	if !networkNameRE.MatchString(c.LoadBalancerName) || len(c.LoadBalancerName) > 80-len("-internal") {
		errs = append(errs, fmt.Errorf("loadBalancerName %q: want a load balancer name (1-71 letters, digits, _ . -)", c.LoadBalancerName))
	}
	for _, f := range [][2]string{{"vnetName", c.VnetName}, {"subnetName", c.SubnetName}, {"securityGroupName", c.SecurityGroupName}} {
		if f[1] != "" && !networkNameRE.MatchString(f[1]) {
			errs = append(errs, fmt.Errorf("%s %q: want an Azure resource name (1-80 letters, digits, _ . -)", f[0], f[1]))
		}
	}
	if (c.VnetName == "") != (c.SubnetName == "") {
		errs = append(errs, fmt.Errorf("vnetName %q and subnetName %q: set both (the internal load balancers' subnet) or neither", c.VnetName, c.SubnetName))
	}
	for _, f := range [][2]string{{"loadBalancerResourceGroup", c.LoadBalancerResourceGroup}, {"vnetResourceGroup", c.VnetResourceGroup},
		{"securityGroupResourceGroup", c.SecurityGroupResourceGroup}} {
		if f[1] != "" && !resourceGroupRE.MatchString(f[1]) {
			errs = append(errs, fmt.Errorf("%s %q: want a resource group name", f[0], f[1]))
		}
	}
	return errs
}

func orGroup(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// lbGroup, vnetGroup and nsgGroup are the resource groups of the load
// balancers, the virtual network and the security group.
func (c *Config) lbGroup() string   { return orGroup(c.LoadBalancerResourceGroup, c.ResourceGroup) }
func (c *Config) vnetGroup() string { return orGroup(c.VnetResourceGroup, c.ResourceGroup) }
func (c *Config) nsgGroup() string  { return orGroup(c.SecurityGroupResourceGroup, c.ResourceGroup) }
