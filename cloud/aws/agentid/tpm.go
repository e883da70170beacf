package agentid

import (
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
)

var _ nodeid.TPMKeyer = (*NodeIdentity)(nil)

// TPMKey names the attestation key an EC2 instance's NitroTPM proves its
// joins with: the TCG default RSA AK under the endorsement hierarchy, and
// the RSA endorsement key with it. AWS certifies no attestation key;
// EC2's GetInstanceTpmEkPub vouches for the instance's endorsement key,
// and the approver proves the AK to be in the TPM of that EK by credential
// activation (a challenge only that TPM, holding that AK, can answer).
func (n *NodeIdentity) TPMKey() node.Key { return node.DefaultKey }
