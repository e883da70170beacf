package kit

// TagLabels holds the tags of a cloud whose tags are names, not keys with
// values (DigitalOcean, Linode), as view.Instance.Labels: each tag a key
// with an empty value; nil for no tags.
func TagLabels(tags []string) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	out := make(map[string]string, len(tags))
	for _, t := range tags {
		out[t] = ""
	}
	return out
}
