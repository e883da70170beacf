// Package loadbalancer is what a backend's Service load balancers are built
// from, so that a backend writes only its cloud's calls and annotations:
//
//   - Cloud, the backend's half: the name its own CCM would give a
//     Service's load balancer, the spec a Service and its nodes call for
//     (its annotations read through Annotations), and the API's list, get,
//     create, update and delete;
//   - Balancers, the rest: cloudprovider.LoadBalancer and
//     cloud.LoadBalancerInventory over a Cloud. It finds a Service's load
//     balancer by the id the Service names, the id it last saw, the
//     Service's UID in the load balancer's tags, or the name (adopting a
//     load balancer the cloud's own CCM made: tagged, never recreated);
//     updates only when the fingerprint of what the cloud holds differs
//     from what the Service calls for; refuses a load balancer of another
//     cluster or Service; answers cloud.PendingError while the cloud is
//     still building one;
//   - what every cloud's spec is made of: Ports, HealthCheckNodePort
//     (externalTrafficPolicy: Local), SourceRanges, Targets (the nodes),
//     Ingress (ip, hostname, ipMode) and Fingerprint;
//   - Owner, and its codecs for clouds whose tags are names (StringTags)
//     or keys with values (LabelTags).
//
// ccm/servicelb runs the controller over Balancers; the conformance suite's
// RunLoadBalancers holds every backend to the same contract.
package loadbalancer
