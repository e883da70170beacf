// Package aws is mooring's AWS backend, registered as "aws" (backend.go;
// the node identity registers from its own package, agentid). A node
// proves which EC2 instance it is without any secret of mooring's:
//
//   - on the node, agentid (cloud/aws/agentid, all mooring-agent links of
//     the backend) reads the instance's metadata over IMDSv2 and signs,
//     with its instance profile's credentials, an STS GetCallerIdentity
//     request whose signed headers carry the CSR key's binding (the
//     evidence; its wire form is agentid's evidence.go);
//   - in the approver, attest.go's Verifier replays that request to STS and
//     accepts the answer only for a session of a configured node role in the
//     cluster's account, whose session name is the instance id;
//   - with TPM evidence (cloud/tpm), tpm.go's VerifyTPM (cloud.TPMVerifier)
//     proves the join by the instance's NitroTPM: the quote binds the CSR
//     key, its EK is the one EC2's GetInstanceTpmEkPub reports, and the
//     AK is proven in that TPM by credential activation over two CSRs;
//   - view.go lists the cluster's instances (tag
//     kubernetes.io/cluster/<clusterID> = owned or shared) with paginated
//     DescribeInstances calls into mooring's shared instance view, with the
//     upstream AWS CCM's providerIDs (aws:///<zone>/<id>) and address order,
//     Node names under the node name policy of agentid's names.go, and
//     whether EC2 describes NitroTPM (tpmSupport v2.0: view.Instance.VTPM);
//   - provider.go and instances.go are the CCM's k8s.io/cloud-provider
//     provider (InstancesV2 over that view, and cloud.Attester), configured
//     by config.go's cloud-config;
//   - upstream.go hands load balancers and routes, with loadBalancers:
//     upstream, to the upstream AWS provider (k8s.io/cloud-provider-aws);
//     without it the backend has none.
//
// Credentials for the EC2 and STS calls come from the AWS SDK's default
// chain. Tests run against awstest, an EC2, STS and IMDS stand-in on
// loopback.
package aws
