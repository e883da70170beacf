// Package kit is what a cloud backend's provider half is built from, so
// that the backend holds only what is its own (its SDK calls, its names,
// its evidence):
//
//   - Base, embedded in the backend's Cloud: InstancesV2 over the shared
//     view (ViewInstances: a Node's instance is gone only when the cloud
//     itself says so), Zones over the view or none, ProviderName, the
//     approver's Attester, and the cloudprovider.Interface methods every
//     backend answers alike; InstancesOnly adds the rest for a backend
//     without load balancers or routes. The backend writes
//     ConfirmInstance (its SDK's lookup of one instance, answering
//     *AbsentError or *ForeignError) and, when its view is not indexed by
//     providerID, FindInstance;
//   - Factory, the backend's registered provider factory;
//   - ByID, the ConfirmInstance of a cloud that gets one instance by the ID
//     in its providerID, and CheckedBy for Options.ProviderID;
//   - the cloud config's parts: ParseConfig (strict YAML or JSON, defaults,
//     every problem at once), ViewConfig (instanceMaxAge,
//     minRefreshInterval, requestTimeout) or ListConfig (and
//     maxFailureBackoff, with the view's options), Duration tables, Secret
//     (an API token from a file or an environment variable; TokenSecret,
//     DefaultSecretEnv), CheckEndpoint, CheckEndpointField and
//     RequiredEndpointField, CheckOnlyPolicy, CheckScopes,
//     ErrClusterIDRequired, CAFilePool, and ConfigError, validate's answer;
//   - the view's source: ReadWhole (a paged list whole or an error, read
//     again while it changes between its pages), NumericProviderID,
//     TagLabels; BearerClient (OrBearer), for an API that takes a bearer
//     token;
//   - RouteScope, which of a cloud's routes are the cluster's: inside the
//     cluster CIDRs (ParseClusterCIDRs), via a next hop that is, or was, a
//     cluster server's address.
//
// cloud/cloudtest is its counterpart for the test endpoints.
package kit
