package loadbalancer

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Owner ties a load balancer to a Service of a cluster. Cluster and UID
// decide; Namespace and Service are for logs and may be empty (a cloud
// whose tags are short keeps them where they fit).
type Owner struct {
	Cluster, UID       string
	Namespace, Service string
}

// OwnerOf is the Owner a load balancer for svc gets in cluster.
func OwnerOf(cluster string, svc *v1.Service) Owner {
	return Owner{Cluster: cluster, UID: string(svc.UID), Namespace: svc.Namespace, Service: svc.Name}
}

// Zero reports an untagged load balancer: made by hand or by the cloud's
// own CCM, adoptable by name.
func (o Owner) Zero() bool { return o.Cluster == "" && o.UID == "" }

// StringTags writes an Owner as tags that are names (DigitalOcean's,
// Linode's): "<prefix>:cluster:<cluster>", "<prefix>:uid:<uid>" and, when
// it fits in Max, "<prefix>:service:<namespace>:<name>".
type StringTags struct {
	Prefix string
	// Max is the longest tag the cloud takes; 0 is no limit.
	Max int
}

// Tags are o's tags; the cluster and UID tags are always there (the
// backend checks their length against its cloud's limit).
func (s StringTags) Tags(o Owner) []string {
	tags := []string{s.Prefix + ":cluster:" + o.Cluster, s.Prefix + ":uid:" + o.UID}
	if o.Namespace != "" && o.Service != "" {
		if t := s.Prefix + ":service:" + o.Namespace + ":" + o.Service; s.Max == 0 || len(t) <= s.Max {
			tags = append(tags, t)
		}
	}
	return tags
}

// Owner reads tags back; tags of no Owner give the zero Owner.
func (s StringTags) Owner(tags []string) Owner {
	var o Owner
	for _, t := range tags {
		rest, ok := strings.CutPrefix(t, s.Prefix+":")
		if !ok {
			continue
		}
		switch key, val, _ := strings.Cut(rest, ":"); key {
		case "cluster":
			o.Cluster = val
		case "uid":
			o.UID = val
		case "service":
			o.Namespace, o.Service, _ = strings.Cut(val, ":")
		}
	}
	return o
}

// Mine reports whether tags hold one of the codec's tags: a load balancer
// some mooring cluster made or adopted.
func (s StringTags) Mine(tags []string) bool {
	for _, t := range tags {
		if strings.HasPrefix(t, s.Prefix+":") {
			return true
		}
	}
	return false
}

// LabelTags writes an Owner as labels, keys with values (Hetzner's):
// "<prefix>/cluster", "<prefix>/service-uid", "<prefix>/service-namespace"
// and "<prefix>/service-name".
type LabelTags struct{ Prefix string }

// Labels are o's labels, to merge into the load balancer's.
func (l LabelTags) Labels(o Owner) map[string]string {
	m := map[string]string{l.Prefix + "/cluster": o.Cluster, l.Prefix + "/service-uid": o.UID}
	if o.Namespace != "" {
		m[l.Prefix+"/service-namespace"] = o.Namespace
	}
	if o.Service != "" {
		m[l.Prefix+"/service-name"] = o.Service
	}
	return m
}

// Owner reads labels back.
func (l LabelTags) Owner(labels map[string]string) Owner {
	return Owner{Cluster: labels[l.Prefix+"/cluster"], UID: labels[l.Prefix+"/service-uid"],
		Namespace: labels[l.Prefix+"/service-namespace"], Service: labels[l.Prefix+"/service-name"]}
}
