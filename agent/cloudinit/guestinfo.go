package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// The guestinfo keys that cloud-init's VMware datasource reads (its
// guestinfo transport, through VMware Tools), with their encodings.
const (
	GuestInfoMetadata         = "guestinfo.metadata"
	GuestInfoMetadataEncoding = "guestinfo.metadata.encoding"
	GuestInfoUserData         = "guestinfo.userdata"
	GuestInfoUserDataEncoding = "guestinfo.userdata.encoding"
)

// GuestInfo turns rendered user-data into the extra config keys (VMX
// guestinfo.* options) of a vSphere VM, for cloud-init's VMware datasource,
// as lines key=value: guestinfo.userdata, gzip+base64; guestinfo.metadata,
// base64 YAML that sets the host name (local-hostname: hostname, the VM's
// name, which the agent takes as the node's) and has cloud-init blank
// guestinfo.userdata once it has read it (redact), so that the bootstrap
// token and the join ticket in it do not stay readable from inside the VM
// through VMware Tools. hostname must be a DNS-1123 subdomain.
func GuestInfo(userData []byte, hostname string) ([]byte, error) {
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(hostname)); len(msgs) > 0 {
		return nil, fmt.Errorf("host name %.80q: %s", hostname, strings.Join(msgs, "; "))
	}
	md, err := yaml.Marshal(map[string]any{"local-hostname": hostname, "redact": []string{"userdata"}})
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := w.Write(userData); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, kv := range [][2]string{
		{GuestInfoMetadata, base64.StdEncoding.EncodeToString(md)},
		{GuestInfoMetadataEncoding, "base64"},
		{GuestInfoUserData, base64.StdEncoding.EncodeToString(gz.Bytes())},
		{GuestInfoUserDataEncoding, "gzip+base64"},
	} {
		fmt.Fprintf(&out, "%s=%s\n", kv[0], kv[1])
	}
	return out.Bytes(), nil
}
